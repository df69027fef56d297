"""AlterConfigs (key 33), versions 0-2: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's AlterConfigsRequest.json and AlterConfigsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.ALTER_CONFIGS
NAME = 'AlterConfigs'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = 2
FLEXIBLE_RESPONSE_FROM = 2

REQUEST = (
    F('resources', '[]struct', (0, 2), fields=(
        F('resource_type', 'int8', (0, 2)),
        F('resource_name', 'string', (0, 2)),
        F('configs', '[]struct', (0, 2), fields=(
            F('name', 'string', (0, 2)),
            F('value', 'string', (0, 2), nullable=(0, 2)),
        )),
    )),
    F('validate_only', 'bool', (0, 2)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 2)),
    F('responses', '[]struct', (0, 2), fields=(
        F('error_code', 'int16', (0, 2)),
        F('error_message', 'string', (0, 2), nullable=(0, 2)),
        F('resource_type', 'int8', (0, 2)),
        F('resource_name', 'string', (0, 2)),
    )),
)
