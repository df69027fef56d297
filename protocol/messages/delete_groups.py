"""DeleteGroups (key 42), versions 0-2: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's DeleteGroupsRequest.json and DeleteGroupsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DELETE_GROUPS
NAME = 'DeleteGroups'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = 2
FLEXIBLE_RESPONSE_FROM = 2

REQUEST = (
    F('groups_names', '[]string', (0, 2)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 2)),
    F('results', '[]struct', (0, 2), fields=(
        F('group_id', 'string', (0, 2)),
        F('error_code', 'int16', (0, 2)),
    )),
)
