"""Produce (key 0), versions 0-9 (Kafka 2.8's table): request and response fields.

Declared from Kafka's ProduceRequest.json and ProduceResponse.json. Flexible from v9; v3 adds
TransactionalId (and only RecordBatch v2 is allowed in the records from then on), v5 the log
start offset in the response, v8 the per-record errors and the error message. Versions 10+
(KIP-951's tagged leader hints) are later than Kafka 2.8 and not declared. Field names are
Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.PRODUCE
NAME = 'Produce'
VERSIONS = (0, 9)
FLEXIBLE_REQUEST_FROM = 9
FLEXIBLE_RESPONSE_FROM = 9

REQUEST = (
    F('transactional_id', 'string', (3, 9), nullable=(3, 9)),
    F('acks', 'int16', (0, 9)),
    F('timeout_ms', 'int32', (0, 9)),
    F('topic_data', '[]struct', (0, 9), fields=(
        F('name', 'string', (0, 9)),
        F('partition_data', '[]struct', (0, 9), fields=(
            F('index', 'int32', (0, 9)),
            F('records', 'records', (0, 9), nullable=(0, 9)),
        )),
    )),
)

RESPONSE = (
    F('responses', '[]struct', (0, 9), fields=(
        F('name', 'string', (0, 9)),
        F('partition_responses', '[]struct', (0, 9), fields=(
            F('index', 'int32', (0, 9)),
            F('error_code', 'int16', (0, 9)),
            F('base_offset', 'int64', (0, 9)),
            F('log_append_time_ms', 'int64', (2, 9), default=-1),
            F('log_start_offset', 'int64', (5, 9), default=-1),
            F('record_errors', '[]struct', (8, 9), fields=(
                F('batch_index', 'int32', (8, 9)),
                F('batch_index_error_message', 'string', (8, 9), nullable=(8, 9)),
            )),
            F('error_message', 'string', (8, 9), nullable=(8, 9)),
        )),
    )),
    F('throttle_time_ms', 'int32', (1, 9), default=0),
)
