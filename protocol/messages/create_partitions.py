"""CreatePartitions (key 37), versions 0-3: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's CreatePartitionsRequest.json and CreatePartitionsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.CREATE_PARTITIONS
NAME = 'CreatePartitions'
VERSIONS = (0, 3)
FLEXIBLE_REQUEST_FROM = 2
FLEXIBLE_RESPONSE_FROM = 2

REQUEST = (
    F('topics', '[]struct', (0, 3), fields=(
        F('name', 'string', (0, 3)),
        F('count', 'int32', (0, 3)),
        F('assignments', '[]struct', (0, 3), nullable=(0, 3), fields=(
            F('broker_ids', '[]int32', (0, 3)),
        )),
    )),
    F('timeout_ms', 'int32', (0, 3)),
    F('validate_only', 'bool', (0, 3)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 3)),
    F('results', '[]struct', (0, 3), fields=(
        F('name', 'string', (0, 3)),
        F('error_code', 'int16', (0, 3)),
        F('error_message', 'string', (0, 3), nullable=(0, 3)),
    )),
)
