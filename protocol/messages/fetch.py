"""Fetch (key 1), versions 0-12: request and response fields.

Declared from Kafka's FetchRequest.json and FetchResponse.json (Kafka 2.8's table, v12 the
first flexible version); fields that only exist after v12 (topic ids, replica state, node
endpoints) are left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.FETCH
NAME = 'Fetch'
VERSIONS = (0, 12)
FLEXIBLE_REQUEST_FROM = 12
FLEXIBLE_RESPONSE_FROM = 12

REQUEST = (
    F('cluster_id', 'string', (12, 12), nullable=(12, 12), tag=0),
    F('replica_id', 'int32', (0, 12), default=-1),
    F('max_wait_ms', 'int32', (0, 12)),
    F('min_bytes', 'int32', (0, 12)),
    F('max_bytes', 'int32', (3, 12), default=2147483647),
    F('isolation_level', 'int8', (4, 12), default=0),
    F('session_id', 'int32', (7, 12), default=0),
    F('session_epoch', 'int32', (7, 12), default=-1),
    F('topics', '[]struct', (0, 12), fields=(
        F('topic', 'string', (0, 12)),
        F('partitions', '[]struct', (0, 12), fields=(
            F('partition', 'int32', (0, 12)),
            F('current_leader_epoch', 'int32', (9, 12), default=-1),
            F('fetch_offset', 'int64', (0, 12)),
            F('last_fetched_epoch', 'int32', (12, 12), default=-1),
            F('log_start_offset', 'int64', (5, 12), default=-1),
            F('partition_max_bytes', 'int32', (0, 12)),
        )),
    )),
    F('forgotten_topics_data', '[]struct', (7, 12), fields=(
        F('topic', 'string', (7, 12)),
        F('partitions', '[]int32', (7, 12)),
    )),
    F('rack_id', 'string', (11, 12), default=''),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 12)),
    F('error_code', 'int16', (7, 12)),
    F('session_id', 'int32', (7, 12), default=0),
    F('responses', '[]struct', (0, 12), fields=(
        F('topic', 'string', (0, 12)),
        F('partitions', '[]struct', (0, 12), fields=(
            F('partition_index', 'int32', (0, 12)),
            F('error_code', 'int16', (0, 12)),
            F('high_watermark', 'int64', (0, 12)),
            F('last_stable_offset', 'int64', (4, 12), default=-1),
            F('log_start_offset', 'int64', (5, 12), default=-1),
            F('diverging_epoch', 'struct', (12, 12), tag=0, fields=(
                F('epoch', 'int32', (12, 12), default=-1),
                F('end_offset', 'int64', (12, 12), default=-1),
            )),
            F('current_leader', 'struct', (12, 12), tag=1, fields=(
                F('leader_id', 'int32', (12, 12), default=-1),
                F('leader_epoch', 'int32', (12, 12), default=-1),
            )),
            F('snapshot_id', 'struct', (12, 12), tag=2, fields=(
                F('end_offset', 'int64', (12, 12), default=-1),
                F('epoch', 'int32', (12, 12), default=-1),
            )),
            F('aborted_transactions', '[]struct', (4, 12), nullable=(4, 12), fields=(
                F('producer_id', 'int64', (4, 12)),
                F('first_offset', 'int64', (4, 12)),
            )),
            F('preferred_read_replica', 'int32', (11, 12), default=-1),
            F('records', 'records', (0, 12), nullable=(0, 12)),
        )),
    )),
)
