"""DescribeClientQuotas (key 48), versions 0-1: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's DescribeClientQuotasRequest.json and DescribeClientQuotasResponse.json
(v1 is flexible). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
NAME = 'DescribeClientQuotas'
VERSIONS = (0, 1)
FLEXIBLE_REQUEST_FROM = 1
FLEXIBLE_RESPONSE_FROM = 1

REQUEST = (
    F('components', '[]struct', (0, 1), fields=(
        F('entity_type', 'string', (0, 1)),
        F('match_type', 'int8', (0, 1)),
        F('match', 'string', (0, 1), nullable=(0, 1)),
    )),
    F('strict', 'bool', (0, 1)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 1)),
    F('error_code', 'int16', (0, 1)),
    F('error_message', 'string', (0, 1), nullable=(0, 1)),
    F('entries', '[]struct', (0, 1), nullable=(0, 1), fields=(
        F('entity', '[]struct', (0, 1), fields=(
            F('entity_type', 'string', (0, 1)),
            F('entity_name', 'string', (0, 1), nullable=(0, 1)),
        )),
        F('values', '[]struct', (0, 1), fields=(
            F('key', 'string', (0, 1)),
            F('value', 'float64', (0, 1)),
        )),
    )),
)
