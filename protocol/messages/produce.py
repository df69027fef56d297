"""Produce (key 0), versions 0-2: request and response fields.

Declared from Kafka's ProduceRequest.json and ProduceResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.PRODUCE
NAME = 'Produce'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('acks', 'int16', (0, 2)),
    F('timeout_ms', 'int32', (0, 2)),
    F('topic_data', '[]struct', (0, 2), fields=(
        F('name', 'string', (0, 2)),
        F('partition_data', '[]struct', (0, 2), fields=(
            F('index', 'int32', (0, 2)),
            F('records', 'records', (0, 2), nullable=(0, 2)),
        )),
    )),
)

RESPONSE = (
    F('responses', '[]struct', (0, 2), fields=(
        F('name', 'string', (0, 2)),
        F('partition_responses', '[]struct', (0, 2), fields=(
            F('index', 'int32', (0, 2)),
            F('error_code', 'int16', (0, 2)),
            F('base_offset', 'int64', (0, 2)),
            F('log_append_time_ms', 'int64', (2, 2), default=-1),
        )),
    )),
    F('throttle_time_ms', 'int32', (1, 2), default=0),
)
