"""Authorized-operation bitfields (KIP-430) for Metadata v8+ and DescribeCluster.

Kafka answers INT32_MIN when the client did not ask, and otherwise the operations the
authorizer allows; with no authorizer configured that is every operation Kafka supports on the
resource (AuthHelper.authorizedOperations, AclEntry.supportedOperations in Kafka 2.8). This broker
has no authorizer yet, so it answers those sets; an authorizer would filter them here.
"""

from __future__ import annotations

from enum import IntEnum

NOT_REQUESTED = -(1 << 31)  # Integer.MIN_VALUE, the schemas' default


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


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
