"""OffsetFetch (key 9), versions 0-7: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's OffsetFetchRequest.json and OffsetFetchResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.OFFSET_FETCH
NAME = 'OffsetFetch'
VERSIONS = (0, 7)
FLEXIBLE_REQUEST_FROM = 6
FLEXIBLE_RESPONSE_FROM = 6

REQUEST = (
    F('group_id', 'string', (0, 7)),
    F('topics', '[]struct', (0, 7), nullable=(2, 7), fields=(
        F('name', 'string', (0, 7)),
        F('partition_indexes', '[]int32', (0, 7)),
    )),
    F('require_stable', 'bool', (7, 7), default=False),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (3, 7)),
    F('topics', '[]struct', (0, 7), fields=(
        F('name', 'string', (0, 7)),
        F('partitions', '[]struct', (0, 7), fields=(
            F('partition_index', 'int32', (0, 7)),
            F('committed_offset', 'int64', (0, 7)),
            F('committed_leader_epoch', 'int32', (5, 7), default=-1),
            F('metadata', 'string', (0, 7), nullable=(0, 7)),
            F('error_code', 'int16', (0, 7)),
        )),
    )),
    F('error_code', 'int16', (2, 7), default=0),
)
