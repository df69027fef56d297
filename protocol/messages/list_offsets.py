"""ListOffsets (key 2), versions 0-1: request and response fields.

Declared from Kafka's ListOffsetsRequest.json and ListOffsetsResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.LIST_OFFSETS
NAME = 'ListOffsets'
VERSIONS = (0, 1)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('replica_id', 'int32', (0, 1)),
    F('topics', '[]struct', (0, 1), fields=(
        F('name', 'string', (0, 1)),
        F('partitions', '[]struct', (0, 1), fields=(
            F('partition_index', 'int32', (0, 1)),
            F('timestamp', 'int64', (0, 1)),
            F('max_num_offsets', 'int32', (0, 0), default=1),
        )),
    )),
)

RESPONSE = (
    F('topics', '[]struct', (0, 1), fields=(
        F('name', 'string', (0, 1)),
        F('partitions', '[]struct', (0, 1), fields=(
            F('partition_index', 'int32', (0, 1)),
            F('error_code', 'int16', (0, 1)),
            F('old_style_offsets', '[]int64', (0, 0)),
            F('timestamp', 'int64', (1, 1), default=-1),
            F('offset', 'int64', (1, 1), default=-1),
        )),
    )),
)
