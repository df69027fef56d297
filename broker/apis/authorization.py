"""What each API asks of the authorizer: Kafka 2.8's KafkaApis checks, as one table.

`RULES` names, per API key, the operation and resource type each of its checks needs (the first
entry is the API's main check). Handlers call `allowed(ctx, name)` / `error(ctx, name)` with the
resource name they are about to act on; the operation and type come from this table, never
from the handler, so the table is the whole policy. `error` answers Kafka's code for the type
(TOPIC_AUTHORIZATION_FAILED 29, GROUP_AUTHORIZATION_FAILED 30, CLUSTER_AUTHORIZATION_FAILED 31,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53). Every refusal counts in
`authorization_denials_total{api}` and logs one debug event (no payloads). Without an authorizer
every check passes.

Until SASL/TLS land every connection is User:ANONYMOUS, the brokers' own inter-broker connections
included: with an authorizer on a PLAINTEXT inter-broker listener, `super.users=User:ANONYMOUS`
(or a ClusterAction ACL for it) keeps replication and the controller working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import MODULES

if TYPE_CHECKING:
    from broker.dispatch import RequestContext

log = structlog.get_logger()

Op = AclOperation
T = ResourceType


@dataclass(frozen=True)
class Rule:
    operation: AclOperation
    resource_type: ResourceType


TOPIC_READ, TOPIC_WRITE, TOPIC_DESCRIBE = Rule(Op.READ, T.TOPIC), Rule(Op.WRITE, T.TOPIC), Rule(Op.DESCRIBE, T.TOPIC)
CLUSTER_ACTION = Rule(Op.CLUSTER_ACTION, T.CLUSTER)
GROUP_READ, GROUP_DESCRIBE = Rule(Op.READ, T.GROUP), Rule(Op.DESCRIBE, T.GROUP)

# Kafka 2.8 KafkaApis, handler by handler.
RULES: dict[ApiKey, tuple[Rule, ...]] = {
    ApiKey.PRODUCE: (TOPIC_WRITE, Rule(Op.IDEMPOTENT_WRITE, T.CLUSTER), Rule(Op.WRITE, T.TRANSACTIONAL_ID)),
    ApiKey.FETCH: (TOPIC_READ, CLUSTER_ACTION),  # consumer; follower (replica_id >= 0)
    ApiKey.LIST_OFFSETS: (TOPIC_DESCRIBE,),
    # filter; auto-creation (cluster, else the topic); cluster authorized operations
    ApiKey.METADATA: (TOPIC_DESCRIBE, Rule(Op.CREATE, T.CLUSTER), Rule(Op.CREATE, T.TOPIC), Rule(Op.DESCRIBE, T.CLUSTER)),
    ApiKey.LEADER_AND_ISR: (CLUSTER_ACTION,),
    ApiKey.STOP_REPLICA: (CLUSTER_ACTION,),
    ApiKey.UPDATE_METADATA: (CLUSTER_ACTION,),
    ApiKey.CONTROLLED_SHUTDOWN: (CLUSTER_ACTION,),
    ApiKey.OFFSET_COMMIT: (GROUP_READ, TOPIC_READ),
    ApiKey.OFFSET_FETCH: (GROUP_DESCRIBE, TOPIC_DESCRIBE),
    ApiKey.FIND_COORDINATOR: (GROUP_DESCRIBE,),
    ApiKey.JOIN_GROUP: (GROUP_READ,),
    ApiKey.HEARTBEAT: (GROUP_READ,),
    ApiKey.LEAVE_GROUP: (GROUP_READ,),
    ApiKey.SYNC_GROUP: (GROUP_READ,),
    ApiKey.DESCRIBE_GROUPS: (GROUP_DESCRIBE,),
    ApiKey.LIST_GROUPS: (Rule(Op.DESCRIBE, T.CLUSTER), GROUP_DESCRIBE),  # cluster, else filter groups
    # cluster, else per topic; the created topic's configs in the answer
    ApiKey.CREATE_TOPICS: (Rule(Op.CREATE, T.CLUSTER), Rule(Op.CREATE, T.TOPIC), Rule(Op.DESCRIBE_CONFIGS, T.TOPIC)),
    ApiKey.DELETE_TOPICS: (Rule(Op.DELETE, T.TOPIC),),
    ApiKey.INIT_PRODUCER_ID: (Rule(Op.IDEMPOTENT_WRITE, T.CLUSTER), Rule(Op.WRITE, T.TRANSACTIONAL_ID)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (TOPIC_DESCRIBE, CLUSTER_ACTION),  # consumer; follower
    ApiKey.DESCRIBE_CONFIGS: (Rule(Op.DESCRIBE_CONFIGS, T.TOPIC), Rule(Op.DESCRIBE_CONFIGS, T.CLUSTER)),
    ApiKey.ALTER_CONFIGS: (Rule(Op.ALTER_CONFIGS, T.TOPIC), Rule(Op.ALTER_CONFIGS, T.CLUSTER)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (Rule(Op.ALTER_CONFIGS, T.TOPIC), Rule(Op.ALTER_CONFIGS, T.CLUSTER)),
    ApiKey.CREATE_PARTITIONS: (Rule(Op.ALTER, T.TOPIC),),
    ApiKey.DELETE_GROUPS: (Rule(Op.DELETE, T.GROUP),),
    ApiKey.OFFSET_DELETE: (Rule(Op.DELETE, T.GROUP), TOPIC_READ),
    ApiKey.DESCRIBE_CLUSTER: (Rule(Op.DESCRIBE, T.CLUSTER),),
    # The ACL APIs themselves: Describe / Alter on the cluster (KafkaApis.handle*AclsRequest).
    ApiKey.DESCRIBE_ACLS: (Rule(Op.DESCRIBE, T.CLUSTER),),
    ApiKey.CREATE_ACLS: (Rule(Op.ALTER, T.CLUSTER),),
    ApiKey.DELETE_ACLS: (Rule(Op.ALTER, T.CLUSTER),),
    # Client quotas (KafkaApis.handleDescribe/AlterClientQuotasRequest).
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (Rule(Op.DESCRIBE_CONFIGS, T.CLUSTER),),
    ApiKey.ALTER_CLIENT_QUOTAS: (Rule(Op.ALTER_CONFIGS, T.CLUSTER),),
    # SCRAM credentials (KIP-554): Describe / Alter on the cluster. SaslHandshake and
    # SaslAuthenticate are checked by nothing: they come before there is anyone to authorize.
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (Rule(Op.DESCRIBE, T.CLUSTER),),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (Rule(Op.ALTER, T.CLUSTER),),
}

FAILURE: dict[ResourceType, ErrorCode] = {
    T.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    T.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    T.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    T.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def rule(ctx: RequestContext, which: int = 0) -> Rule:
    return RULES[ApiKey(ctx.api_key)][which]


def allowed(ctx: RequestContext, name: str = CLUSTER_NAME, which: int = 0, count: bool = True) -> bool:
    """Whether the request's principal may do check `which` of its API on `name`.

    `count=False` for checks that only filter what is shown (Metadata's topic list, ListGroups'
    groups) or that fall back to another check: those are not denials."""
    authorizer = ctx.services.authorizer
    if not authorizer.enabled:
        return True
    r = rule(ctx, which)
    if authorizer.allowed(ctx.principal, ctx.host, r.operation, r.resource_type, name):
        return True
    if count:
        denied(ctx, r, name)
    return False


def denied(ctx: RequestContext, r: Rule, name: str) -> None:
    api = str(MODULES[ApiKey(ctx.api_key)].NAME)  # as requests_total names it: Produce, JoinGroup...
    counter = ctx.services.authorizer.denials
    if counter is not None:
        counter.inc(api=api)
    log.debug("authorization.denied", broker_id=ctx.services.broker_id, api=api, principal=ctx.principal,
              host=ctx.host, operation=r.operation.name, resource_type=r.resource_type.name, resource=name)


def error(ctx: RequestContext, name: str = CLUSTER_NAME, which: int = 0) -> ErrorCode:
    """NONE, or Kafka's authorization error for the rule's resource type."""
    if allowed(ctx, name, which):
        return ErrorCode.NONE
    return FAILURE[rule(ctx, which).resource_type]


def config_resource_error(ctx: RequestContext, is_topic: bool, name: str) -> ErrorCode:
    """Describe/AlterConfigs: a topic's configs need the operation on the topic, a broker's (or
    broker logger's) on the cluster (RULES' first and second entries)."""
    return error(ctx, name, 0) if is_topic else error(ctx, CLUSTER_NAME, 1)


def operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> frozenset[AclOperation] | None:
    """KIP-430's authorized operations; None without an authorizer (the caller answers all supported)."""
    authorizer = ctx.services.authorizer
    if not authorizer.enabled:
        return None
    return authorizer.operations(ctx.principal, ctx.host, resource_type, name)
