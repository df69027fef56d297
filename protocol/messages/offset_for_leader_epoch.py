"""OffsetForLeaderEpoch (key 23), versions 0-4: request and response fields.

Declared from Kafka's OffsetForLeaderEpochRequest.json and OffsetForLeaderEpochResponse.json
(Kafka 2.8: versions 0-4, flexible from 4). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
NAME = 'OffsetForLeaderEpoch'
VERSIONS = (0, 4)
FLEXIBLE_REQUEST_FROM = 4
FLEXIBLE_RESPONSE_FROM = 4

REQUEST = (
    # -2 when absent (before v3): Kafka's default, "no replica id given".
    F('replica_id', 'int32', (3, 4), default=-2),
    F('topics', '[]struct', (0, 4), fields=(
        F('topic', 'string', (0, 4)),
        F('partitions', '[]struct', (0, 4), fields=(
            F('partition', 'int32', (0, 4)),
            F('current_leader_epoch', 'int32', (2, 4), default=-1),
            F('leader_epoch', 'int32', (0, 4)),
        )),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (2, 4), default=0),
    F('topics', '[]struct', (0, 4), fields=(
        F('topic', 'string', (0, 4)),
        F('partitions', '[]struct', (0, 4), fields=(
            F('error_code', 'int16', (0, 4)),
            F('partition', 'int32', (0, 4)),
            F('leader_epoch', 'int32', (1, 4), default=-1),
            F('end_offset', 'int64', (0, 4), default=-1),
        )),
    )),
)
