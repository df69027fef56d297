"""InitProducerId (key 22), versions 0-4 (Kafka 2.8's range): request and response fields.

Declared from Kafka's InitProducerIdRequest.json and InitProducerIdResponse.json; v5 (Kafka 3.x)
is left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.INIT_PRODUCER_ID
NAME = 'InitProducerId'
VERSIONS = (0, 4)
FLEXIBLE_REQUEST_FROM = 2
FLEXIBLE_RESPONSE_FROM = 2

REQUEST = (
    F('transactional_id', 'string', (0, 4), nullable=(0, 4)),
    F('transaction_timeout_ms', 'int32', (0, 4)),
    F('producer_id', 'int64', (3, 4), default=-1),
    F('producer_epoch', 'int16', (3, 4), default=-1),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 4)),
    F('error_code', 'int16', (0, 4)),
    F('producer_id', 'int64', (0, 4), default=-1),
    F('producer_epoch', 'int16', (0, 4)),
)
