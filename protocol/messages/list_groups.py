"""ListGroups (key 16), versions 0-4: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's ListGroupsRequest.json and ListGroupsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.LIST_GROUPS
NAME = 'ListGroups'
VERSIONS = (0, 4)
FLEXIBLE_REQUEST_FROM = 3
FLEXIBLE_RESPONSE_FROM = 3

REQUEST = (
    F('states_filter', '[]string', (4, 4)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 4)),
    F('error_code', 'int16', (0, 4)),
    F('groups', '[]struct', (0, 4), fields=(
        F('group_id', 'string', (0, 4)),
        F('protocol_type', 'string', (0, 4)),
        F('group_state', 'string', (4, 4)),
    )),
)
