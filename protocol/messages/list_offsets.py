"""ListOffsets (key 2), versions 0-6: request and response fields.

Declared from Kafka's ListOffsetsRequest.json and ListOffsetsResponse.json (Kafka 2.8 serves
0-6); fields that only exist in later versions are left out. Field names are Kafka's, in
snake_case. Flexible from version 6.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.LIST_OFFSETS
NAME = 'ListOffsets'
VERSIONS = (0, 6)
FLEXIBLE_REQUEST_FROM = 6
FLEXIBLE_RESPONSE_FROM = 6

REQUEST = (
    F('replica_id', 'int32', (0, 6)),
    F('isolation_level', 'int8', (2, 6)),
    F('topics', '[]struct', (0, 6), fields=(
        F('name', 'string', (0, 6)),
        F('partitions', '[]struct', (0, 6), fields=(
            F('partition_index', 'int32', (0, 6)),
            F('current_leader_epoch', 'int32', (4, 6), default=-1),
            F('timestamp', 'int64', (0, 6)),
            F('max_num_offsets', 'int32', (0, 0), default=1),
        )),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (2, 6)),
    F('topics', '[]struct', (0, 6), fields=(
        F('name', 'string', (0, 6)),
        F('partitions', '[]struct', (0, 6), fields=(
            F('partition_index', 'int32', (0, 6)),
            F('error_code', 'int16', (0, 6)),
            F('old_style_offsets', '[]int64', (0, 0)),
            F('timestamp', 'int64', (1, 6), default=-1),
            F('offset', 'int64', (1, 6), default=-1),
            F('leader_epoch', 'int32', (4, 6), default=-1),
        )),
    )),
)
