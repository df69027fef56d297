"""FindCoordinator (key 10), versions 0-3 (Kafka 2.8's range): request and response fields.

Declared from Kafka's FindCoordinatorRequest.json and FindCoordinatorResponse.json; v4-6 (Kafka
3.x: batched coordinator keys, KIP-699; share groups) are left out. Field names are Kafka's, in
snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.FIND_COORDINATOR
NAME = 'FindCoordinator'
VERSIONS = (0, 3)
FLEXIBLE_REQUEST_FROM = 3
FLEXIBLE_RESPONSE_FROM = 3

# Kafka's CoordinatorType ids.
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

REQUEST = (
    F('key', 'string', (0, 3)),
    F('key_type', 'int8', (1, 3), default=0),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 3)),
    F('error_code', 'int16', (0, 3)),
    F('error_message', 'string', (1, 3), nullable=(1, 3)),
    F('node_id', 'int32', (0, 3)),
    F('host', 'string', (0, 3)),
    F('port', 'int32', (0, 3)),
)
