"""Metadata, versions 0-11 (Kafka 2.8), answered from the metadata cache.

v0: an empty topic list means all topics; v1+: null means all, empty means none.
Internal topics (`__consumer_offsets`) are flagged is_internal, and a request naming the missing
`__consumer_offsets` creates it only as the internal topic (broker.apis.internal_topics, as Kafka
2.8's AutoTopicCreationManager does), under the same conditions as any auto-creation.
Departure: `__transaction_state` is never created (no transaction coordinator), so it is
UNKNOWN_TOPIC_OR_PARTITION.
Unknown topics are auto-created when `auto.create.topics.enable` is true, the request allows it
(v4+ allow_auto_topic_creation, default true) and it names its topics, and are answered
LEADER_NOT_AVAILABLE until their partitions have leaders, as Kafka does; otherwise
UNKNOWN_TOPIC_OR_PARTITION. Illegal names get INVALID_TOPIC_EXCEPTION.
As Kafka's MetadataCache: v0 lists only live replicas and answers REPLICA_NOT_AVAILABLE when one
is down; v1+ lists every replica with no error. A partition whose leader is not alive is
LEADER_NOT_AVAILABLE with leader -1. leader_epoch (v7+) is the one the controller last sent
(from the partition's state znode). Authorized operations (v8+) are INT32_MIN unless asked for,
then what the authorizer allows (every operation Kafka supports without an authorizer).
Authorization (broker.apis.authorization): topics without Describe are left out of an all-topics
answer and TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs Create on the cluster or
the topic (else TOPIC_AUTHORIZATION_FAILED); cluster operations are 0 without cluster Describe.
v10+: topic ids are the zero UUID (this broker has none); a request naming a topic by id or
with a null name fails with INVALID_REQUEST on every topic, as Kafka 2.8 does.
Departure: until the controller's first UpdateMetadata reaches this broker (just after it starts)
a Metadata request waits for it, up to FIRST_METADATA_WAIT_S, instead of answering with no
brokers and no controller: librdkafka's admin client, told that, waited out its whole timeout
for a controller without asking again.
Departure: offline_replicas (v5+) is always empty: UpdateMetadata v0-2 does not carry it.
"""

from __future__ import annotations

import uuid
from typing import Any

from broker.apis import authorization
from broker.apis.admin import AdminError, TopicSpec
from broker.apis.authorized_operations import CLUSTER_OPERATIONS, NOT_REQUESTED, TOPIC_OPERATIONS, bitfield
from broker.apis.internal_topics import create_offsets_topic
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.metadata import topic_name_error
from broker.security.acl import CLUSTER_NAME, ResourceType
from protocol.errors import ErrorCode
from protocol.messages import metadata as messages
from protocol.topic import GROUP_METADATA_TOPIC_NAME, is_internal

ZERO_UUID = uuid.UUID(int=0)
FIRST_METADATA_WAIT_S = 5.0


def live_brokers(ctx: RequestContext) -> list[dict[str, Any]]:
    """The live brokers at their endpoints on the listener this client connected to, as Kafka
    does (MetadataCache.getAliveEndpoints); a broker without one there is left out. The one
    place Metadata and DescribeCluster choose advertised endpoints."""
    return [{"node_id": bid, "host": host, "port": port, "rack": rack}
            for bid, host, port, rack in ctx.services.metadata.endpoints_for(ctx.conn.listener_name)]


def _invalid(request: dict[str, Any], message: str) -> dict[str, Any]:
    topics: list[dict[str, Any]] = [
        {"error_code": ErrorCode.INVALID_REQUEST, "name": t["name"] or "", "partitions": []}
        for t in request.get("topics") or []]
    return {"brokers": [], "cluster_id": None, "controller_id": -1, "topics": topics}


async def _unknown_topic(ctx: RequestContext, name: str, auto_create: bool) -> dict[str, Any]:
    if topic_name_error(name) is not None:
        return {"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name, "partitions": []}
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if is_internal(name):
        # Only ever created with its own settings (broker.apis.internal_topics).
        if auto_create and name == GROUP_METADATA_TOPIC_NAME:
            created = await create_offsets_topic(ctx.services)
            code = ErrorCode.LEADER_NOT_AVAILABLE if created == ErrorCode.NONE else created
        return {"error_code": code, "name": name, "is_internal": True, "partitions": []}
    if auto_create:
        try:
            await ctx.services.admin.create_topic(TopicSpec(name, -1, -1, None, {}))
            code = ErrorCode.LEADER_NOT_AVAILABLE
        except AdminError as e:
            code = ErrorCode.LEADER_NOT_AVAILABLE if e.code == ErrorCode.TOPIC_ALREADY_EXISTS else e.code
    return {"error_code": code, "name": name, "partitions": []}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    md = services.metadata
    if not md.initialized:
        await services.metadata_updated.wait_until(lambda: md.initialized, FIRST_METADATA_WAIT_S)
    requested = request.get("topics")
    all_topics = requested is None or (ctx.api_version == 0 and not requested)
    if not all_topics:
        for t in requested or []:
            if t["name"] is None:
                return _invalid(request, f"Topic name can not be null for version {ctx.api_version}")
            if t.get("topic_id") not in (None, ZERO_UUID):
                return _invalid(request, f"Topic IDs are not supported in requests for version {ctx.api_version}")
    names = sorted(md.topics) if all_topics else [t["name"] for t in requested or []]
    auto_create = (services.config.auto_create_topics_enable and bool(request.get("allow_auto_topic_creation", True))
                   and not all_topics)
    with_topic_ops = bool(request.get("include_topic_authorized_operations", False))
    # Topics the principal may not Describe are left out of an all-topics answer and answered
    # TOPIC_AUTHORIZATION_FAILED when named, without saying whether they exist (KafkaApis).
    describable = [name for name in names if authorization.allowed(ctx, name, count=not all_topics)]
    hidden = set(names).difference(describable)
    may_create_any = auto_create and authorization.allowed(ctx, which=1, count=False)
    topics: list[dict[str, Any]] = []
    for name in names:
        if name in hidden:
            if not all_topics:
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
                               "is_internal": False, "partitions": [], "topic_id": ZERO_UUID,
                               "topic_authorized_operations": NOT_REQUESTED})
            continue
        topic: dict[str, Any]
        if name not in md.topics:
            if auto_create and not may_create_any and not authorization.allowed(ctx, name, which=2):
                topic = {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
                         "is_internal": is_internal(name), "partitions": []}
            else:
                topic = await _unknown_topic(ctx, name, auto_create)
        else:
            topic = {"error_code": ErrorCode.NONE, "name": name, "is_internal": is_internal(name),
                     "partitions": md.partition_metadata(name, ctx.conn.listener_name, ctx.api_version)}
        topic["topic_id"] = ZERO_UUID
        topic["topic_authorized_operations"] = (_operations(ctx, ResourceType.TOPIC, name, TOPIC_OPERATIONS)
                                                if with_topic_ops else NOT_REQUESTED)
        topics.append(topic)
    cluster_ops = NOT_REQUESTED
    if request.get("include_cluster_authorized_operations", False):
        # KafkaApis: 0 without Describe on the cluster, else what the principal may do there.
        cluster_ops = (_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
                       if authorization.allowed(ctx, which=3, count=False) else 0)
    return {"throttle_time_ms": 0, "brokers": live_brokers(ctx), "cluster_id": services.cluster_id,
            "controller_id": md.controller_id, "topics": topics,
            "cluster_authorized_operations": cluster_ops}


def _operations(ctx: RequestContext, resource_type: ResourceType, name: str, everything: int) -> int:
    """KIP-430's bitfield: the authorizer's answer, or every supported operation without one."""
    ops = authorization.operations(ctx, resource_type, name)
    return everything if ops is None else bitfield(ops)


register(messages, handle)
