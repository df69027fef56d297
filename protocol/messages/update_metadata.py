"""UpdateMetadata (key 6), versions 0-2: request and response fields.

Declared from Kafka's UpdateMetadataRequest.json and UpdateMetadataResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.UPDATE_METADATA
NAME = 'UpdateMetadata'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('controller_id', 'int32', (0, 2)),
    F('controller_epoch', 'int32', (0, 2)),
    F('ungrouped_partition_states', '[]struct', (0, 2), fields=(
        F('topic_name', 'string', (0, 2)),
        F('partition_index', 'int32', (0, 2)),
        F('controller_epoch', 'int32', (0, 2)),
        F('leader', 'int32', (0, 2)),
        F('leader_epoch', 'int32', (0, 2)),
        F('isr', '[]int32', (0, 2)),
        F('zk_version', 'int32', (0, 2)),
        F('replicas', '[]int32', (0, 2)),
    )),
    F('live_brokers', '[]struct', (0, 2), fields=(
        F('id', 'int32', (0, 2)),
        F('v0_host', 'string', (0, 0)),
        F('v0_port', 'int32', (0, 0)),
        F('endpoints', '[]struct', (1, 2), fields=(
            F('port', 'int32', (1, 2)),
            F('host', 'string', (1, 2)),
            F('security_protocol', 'int16', (1, 2)),
        )),
        F('rack', 'string', (2, 2), nullable=(0, 2)),
    )),
)

RESPONSE = (
    F('error_code', 'int16', (0, 2)),
)
