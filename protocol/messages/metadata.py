"""Metadata (key 3), versions 0-11: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's MetadataRequest.json and MetadataResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.METADATA
NAME = 'Metadata'
VERSIONS = (0, 11)
FLEXIBLE_REQUEST_FROM = 9
FLEXIBLE_RESPONSE_FROM = 9

REQUEST = (
    F('topics', '[]struct', (0, 11), nullable=(1, 11), fields=(
        F('topic_id', 'uuid', (10, 11)),
        F('name', 'string', (0, 11), nullable=(10, 11)),
    )),
    F('allow_auto_topic_creation', 'bool', (4, 11), default=True),
    F('include_cluster_authorized_operations', 'bool', (8, 10)),
    F('include_topic_authorized_operations', 'bool', (8, 11)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (3, 11)),
    F('brokers', '[]struct', (0, 11), fields=(
        F('node_id', 'int32', (0, 11)),
        F('host', 'string', (0, 11)),
        F('port', 'int32', (0, 11)),
        F('rack', 'string', (1, 11), nullable=(1, 11)),
    )),
    F('cluster_id', 'string', (2, 11), nullable=(2, 11)),
    F('controller_id', 'int32', (1, 11), default=-1),
    F('topics', '[]struct', (0, 11), fields=(
        F('error_code', 'int16', (0, 11)),
        F('name', 'string', (0, 11)),
        F('topic_id', 'uuid', (10, 11)),
        F('is_internal', 'bool', (1, 11), default=False),
        F('partitions', '[]struct', (0, 11), fields=(
            F('error_code', 'int16', (0, 11)),
            F('partition_index', 'int32', (0, 11)),
            F('leader_id', 'int32', (0, 11)),
            F('leader_epoch', 'int32', (7, 11), default=-1),
            F('replica_nodes', '[]int32', (0, 11)),
            F('isr_nodes', '[]int32', (0, 11)),
            F('offline_replicas', '[]int32', (5, 11)),
        )),
        F('topic_authorized_operations', 'int32', (8, 11), default=-2147483648),
    )),
    F('cluster_authorized_operations', 'int32', (8, 10), default=-2147483648),
)
