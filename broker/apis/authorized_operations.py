"""Authorized-operation bitfields (KIP-430) for Metadata v8+ and DescribeCluster.

Kafka answers INT32_MIN when the client did not ask, and otherwise the operations the
authorizer allows; with no authorizer configured that is every operation Kafka supports on the
resource (AuthHelper.authorizedOperations, AclEntry.supportedOperations in Kafka 2.8). These are
those sets; with an authorizer the handlers answer broker.apis.authorization.operations instead.
"""

from __future__ import annotations

from broker.security.acl import AclOperation

NOT_REQUESTED = -(1 << 31)  # Integer.MIN_VALUE, the schemas' default




def bitfield(operations: frozenset[AclOperation]) -> int:
    """Utils.to32BitField: bit n set for operation code n."""
    out = 0
    for op in operations:
        out |= 1 << int(op)
    return out


A = AclOperation
TOPIC_OPERATIONS = bitfield(frozenset({A.READ, A.WRITE, A.CREATE, A.DESCRIBE, A.DELETE, A.ALTER,
                                       A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS}))
CLUSTER_OPERATIONS = bitfield(frozenset({A.CREATE, A.CLUSTER_ACTION, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS,
                                         A.IDEMPOTENT_WRITE, A.ALTER, A.DESCRIBE}))
GROUP_OPERATIONS = bitfield(frozenset({A.READ, A.DESCRIBE, A.DELETE}))
