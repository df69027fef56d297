"""DescribeConfigs (key 32), versions 0-4: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's DescribeConfigsRequest.json and DescribeConfigsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DESCRIBE_CONFIGS
NAME = 'DescribeConfigs'
VERSIONS = (0, 4)
FLEXIBLE_REQUEST_FROM = 4
FLEXIBLE_RESPONSE_FROM = 4

REQUEST = (
    F('resources', '[]struct', (0, 4), fields=(
        F('resource_type', 'int8', (0, 4)),
        F('resource_name', 'string', (0, 4)),
        F('configuration_keys', '[]string', (0, 4), nullable=(0, 4)),
    )),
    F('include_synonyms', 'bool', (1, 4), default=False),
    F('include_documentation', 'bool', (3, 4), default=False),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 4)),
    F('results', '[]struct', (0, 4), fields=(
        F('error_code', 'int16', (0, 4)),
        F('error_message', 'string', (0, 4), nullable=(0, 4)),
        F('resource_type', 'int8', (0, 4)),
        F('resource_name', 'string', (0, 4)),
        F('configs', '[]struct', (0, 4), fields=(
            F('name', 'string', (0, 4)),
            F('value', 'string', (0, 4), nullable=(0, 4)),
            F('read_only', 'bool', (0, 4)),
            F('is_default', 'bool', (0, 0)),
            F('config_source', 'int8', (1, 4), default=-1),
            F('is_sensitive', 'bool', (0, 4)),
            F('synonyms', '[]struct', (1, 4), fields=(
                F('name', 'string', (1, 4)),
                F('value', 'string', (1, 4), nullable=(1, 4)),
                F('source', 'int8', (1, 4)),
            )),
            F('config_type', 'int8', (3, 4), default=0),
            F('documentation', 'string', (3, 4), nullable=(3, 4)),
        )),
    )),
)
