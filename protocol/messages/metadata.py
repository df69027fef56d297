"""Metadata (key 3), versions 0-2: request and response fields.

Declared from Kafka's MetadataRequest.json and MetadataResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.METADATA
NAME = 'Metadata'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('topics', '[]struct', (0, 2), nullable=(1, 2), fields=(
        F('name', 'string', (0, 2)),
    )),
)

RESPONSE = (
    F('brokers', '[]struct', (0, 2), fields=(
        F('node_id', 'int32', (0, 2)),
        F('host', 'string', (0, 2)),
        F('port', 'int32', (0, 2)),
        F('rack', 'string', (1, 2), nullable=(1, 2), default=None),
    )),
    F('cluster_id', 'string', (2, 2), nullable=(2, 2), default=None),
    F('controller_id', 'int32', (1, 2), default=-1),
    F('topics', '[]struct', (0, 2), fields=(
        F('error_code', 'int16', (0, 2)),
        F('name', 'string', (0, 2)),
        F('is_internal', 'bool', (1, 2), default=False),
        F('partitions', '[]struct', (0, 2), fields=(
            F('error_code', 'int16', (0, 2)),
            F('partition_index', 'int32', (0, 2)),
            F('leader_id', 'int32', (0, 2)),
            F('replica_nodes', '[]int32', (0, 2)),
            F('isr_nodes', '[]int32', (0, 2)),
        )),
    )),
)
