"""DescribeAcls (key 29), versions 0-2: request and response fields, as in Kafka 2.8.

Declared from Kafka's DescribeAclsRequest.json and DescribeAclsResponse.json (v1 adds the pattern
type, v2 is flexible; Kafka 2.8 stops at v2). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DESCRIBE_ACLS
NAME = 'DescribeAcls'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = 2
FLEXIBLE_RESPONSE_FROM = 2

REQUEST = (
    F('resource_type_filter', 'int8', (0, 2)),
    F('resource_name_filter', 'string', (0, 2), nullable=(0, 2)),
    F('pattern_type_filter', 'int8', (1, 2), default=3),
    F('principal_filter', 'string', (0, 2), nullable=(0, 2)),
    F('host_filter', 'string', (0, 2), nullable=(0, 2)),
    F('operation', 'int8', (0, 2)),
    F('permission_type', 'int8', (0, 2)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 2)),
    F('error_code', 'int16', (0, 2)),
    F('error_message', 'string', (0, 2), nullable=(0, 2)),
    F('resources', '[]struct', (0, 2), fields=(
        F('resource_type', 'int8', (0, 2)),
        F('resource_name', 'string', (0, 2)),
        F('pattern_type', 'int8', (1, 2), default=3),
        F('acls', '[]struct', (0, 2), fields=(
            F('principal', 'string', (0, 2)),
            F('host', 'string', (0, 2)),
            F('operation', 'int8', (0, 2)),
            F('permission_type', 'int8', (0, 2)),
        )),
    )),
)
