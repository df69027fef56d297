"""OffsetCommit (key 8), versions 0-8: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's OffsetCommitRequest.json and OffsetCommitResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.OFFSET_COMMIT
NAME = 'OffsetCommit'
VERSIONS = (0, 8)
FLEXIBLE_REQUEST_FROM = 8
FLEXIBLE_RESPONSE_FROM = 8

REQUEST = (
    F('group_id', 'string', (0, 8)),
    F('generation_id', 'int32', (1, 8), default=-1),
    F('member_id', 'string', (1, 8)),
    F('group_instance_id', 'string', (7, 8), nullable=(7, 8)),
    F('retention_time_ms', 'int64', (2, 4), default=-1),
    F('topics', '[]struct', (0, 8), fields=(
        F('name', 'string', (0, 8)),
        F('partitions', '[]struct', (0, 8), fields=(
            F('partition_index', 'int32', (0, 8)),
            F('committed_offset', 'int64', (0, 8)),
            F('committed_leader_epoch', 'int32', (6, 8), default=-1),
            F('commit_timestamp', 'int64', (1, 1), default=-1),
            F('committed_metadata', 'string', (0, 8), nullable=(0, 8)),
        )),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (3, 8)),
    F('topics', '[]struct', (0, 8), fields=(
        F('name', 'string', (0, 8)),
        F('partitions', '[]struct', (0, 8), fields=(
            F('partition_index', 'int32', (0, 8)),
            F('error_code', 'int16', (0, 8)),
        )),
    )),
)
