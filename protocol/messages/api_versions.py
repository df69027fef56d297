"""ApiVersions (key 18), versions 0-3: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's ApiVersionsRequest.json and ApiVersionsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.API_VERSIONS
NAME = 'ApiVersions'
VERSIONS = (0, 3)
FLEXIBLE_REQUEST_FROM = 3
FLEXIBLE_RESPONSE_FROM = 3

REQUEST = (
    F('client_software_name', 'string', (3, 3)),
    F('client_software_version', 'string', (3, 3)),
)

RESPONSE = (
    F('error_code', 'int16', (0, 3)),
    F('api_keys', '[]struct', (0, 3), fields=(
        F('api_key', 'int16', (0, 3)),
        F('min_version', 'int16', (0, 3)),
        F('max_version', 'int16', (0, 3)),
    )),
    F('throttle_time_ms', 'int32', (1, 3)),
    F('supported_features', '[]struct', (3, 3), tag=0, fields=(
        F('name', 'string', (3, 3)),
        F('min_version', 'int16', (3, 3)),
        F('max_version', 'int16', (3, 3)),
    )),
    F('finalized_features_epoch', 'int64', (3, 3), default=-1, tag=1),
    F('finalized_features', '[]struct', (3, 3), tag=2, fields=(
        F('name', 'string', (3, 3)),
        F('max_version_level', 'int16', (3, 3)),
        F('min_version_level', 'int16', (3, 3)),
    )),
)
