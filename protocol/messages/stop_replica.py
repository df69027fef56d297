"""StopReplica (key 5), versions 0-1: request and response fields.

Declared from Kafka's StopReplicaRequest.json and StopReplicaResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case. Version 1 adds the
receiving broker's epoch (KIP-380) and groups the partitions by topic.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.STOP_REPLICA
NAME = 'StopReplica'
VERSIONS = (0, 1)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('controller_id', 'int32', (0, 1)),
    F('controller_epoch', 'int32', (0, 1)),
    F('broker_epoch', 'int64', (1, 1), default=-1),
    F('delete_partitions', 'bool', (0, 1)),
    F('ungrouped_partitions', '[]struct', (0, 0), fields=(
        F('topic_name', 'string', (0, 0)),
        F('partition_index', 'int32', (0, 0)),
    )),
    F('topics', '[]struct', (1, 1), fields=(
        F('name', 'string', (1, 1)),
        F('partition_indexes', '[]int32', (1, 1)),
    )),
)

RESPONSE = (
    F('error_code', 'int16', (0, 1)),
    F('partition_errors', '[]struct', (0, 1), fields=(
        F('topic_name', 'string', (0, 1)),
        F('partition_index', 'int32', (0, 1)),
        F('error_code', 'int16', (0, 1)),
    )),
)
