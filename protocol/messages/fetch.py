"""Fetch (key 1), versions 0-3: request and response fields.

Declared from Kafka's FetchRequest.json and FetchResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.FETCH
NAME = 'Fetch'
VERSIONS = (0, 3)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('replica_id', 'int32', (0, 3), default=-1),
    F('max_wait_ms', 'int32', (0, 3)),
    F('min_bytes', 'int32', (0, 3)),
    F('max_bytes', 'int32', (3, 3), default=2147483647),
    F('topics', '[]struct', (0, 3), fields=(
        F('topic', 'string', (0, 3)),
        F('partitions', '[]struct', (0, 3), fields=(
            F('partition', 'int32', (0, 3)),
            F('fetch_offset', 'int64', (0, 3)),
            F('partition_max_bytes', 'int32', (0, 3)),
        )),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 3)),
    F('responses', '[]struct', (0, 3), fields=(
        F('topic', 'string', (0, 3)),
        F('partitions', '[]struct', (0, 3), fields=(
            F('partition_index', 'int32', (0, 3)),
            F('error_code', 'int16', (0, 3)),
            F('high_watermark', 'int64', (0, 3)),
            F('records', 'records', (0, 3), nullable=(0, 3)),
        )),
    )),
)
