"""DescribeGroups (key 15), versions 0-5: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's DescribeGroupsRequest.json and DescribeGroupsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DESCRIBE_GROUPS
NAME = 'DescribeGroups'
VERSIONS = (0, 5)
FLEXIBLE_REQUEST_FROM = 5
FLEXIBLE_RESPONSE_FROM = 5

REQUEST = (
    F('groups', '[]string', (0, 5)),
    F('include_authorized_operations', 'bool', (3, 5)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 5)),
    F('groups', '[]struct', (0, 5), fields=(
        F('error_code', 'int16', (0, 5)),
        F('group_id', 'string', (0, 5)),
        F('group_state', 'string', (0, 5)),
        F('protocol_type', 'string', (0, 5)),
        F('protocol_data', 'string', (0, 5)),
        F('members', '[]struct', (0, 5), fields=(
            F('member_id', 'string', (0, 5)),
            F('group_instance_id', 'string', (4, 5), nullable=(4, 5)),
            F('client_id', 'string', (0, 5)),
            F('client_host', 'string', (0, 5)),
            F('member_metadata', 'bytes', (0, 5)),
            F('member_assignment', 'bytes', (0, 5)),
        )),
        F('authorized_operations', 'int32', (3, 5), default=-2147483648),
    )),
)
