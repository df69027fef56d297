"""IncrementalAlterConfigs (key 44), versions 0-1: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's IncrementalAlterConfigsRequest.json and IncrementalAlterConfigsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
NAME = 'IncrementalAlterConfigs'
VERSIONS = (0, 1)
FLEXIBLE_REQUEST_FROM = 1
FLEXIBLE_RESPONSE_FROM = 1

REQUEST = (
    F('resources', '[]struct', (0, 1), fields=(
        F('resource_type', 'int8', (0, 1)),
        F('resource_name', 'string', (0, 1)),
        F('configs', '[]struct', (0, 1), fields=(
            F('name', 'string', (0, 1)),
            F('config_operation', 'int8', (0, 1)),
            F('value', 'string', (0, 1), nullable=(0, 1)),
        )),
    )),
    F('validate_only', 'bool', (0, 1)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 1)),
    F('responses', '[]struct', (0, 1), fields=(
        F('error_code', 'int16', (0, 1)),
        F('error_message', 'string', (0, 1), nullable=(0, 1)),
        F('resource_type', 'int8', (0, 1)),
        F('resource_name', 'string', (0, 1)),
    )),
)
