"""OffsetDelete (key 47), version 0: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's OffsetDeleteRequest.json and OffsetDeleteResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.OFFSET_DELETE
NAME = 'OffsetDelete'
VERSIONS = (0, 0)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('group_id', 'string', (0, 0)),
    F('topics', '[]struct', (0, 0), fields=(
        F('name', 'string', (0, 0)),
        F('partitions', '[]struct', (0, 0), fields=(
            F('partition_index', 'int32', (0, 0)),
        )),
    )),
)

RESPONSE = (
    F('error_code', 'int16', (0, 0)),
    F('throttle_time_ms', 'int32', (0, 0)),
    F('topics', '[]struct', (0, 0), fields=(
        F('name', 'string', (0, 0)),
        F('partitions', '[]struct', (0, 0), fields=(
            F('partition_index', 'int32', (0, 0)),
            F('error_code', 'int16', (0, 0)),
        )),
    )),
)
