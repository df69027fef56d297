"""LeaveGroup (key 13), versions 0-4: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's LeaveGroupRequest.json and LeaveGroupResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.LEAVE_GROUP
NAME = 'LeaveGroup'
VERSIONS = (0, 4)
FLEXIBLE_REQUEST_FROM = 4
FLEXIBLE_RESPONSE_FROM = 4

REQUEST = (
    F('group_id', 'string', (0, 4)),
    F('member_id', 'string', (0, 2)),
    F('members', '[]struct', (3, 4), fields=(
        F('member_id', 'string', (3, 4)),
        F('group_instance_id', 'string', (3, 4), nullable=(3, 4)),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 4)),
    F('error_code', 'int16', (0, 4)),
    F('members', '[]struct', (3, 4), fields=(
        F('member_id', 'string', (3, 4)),
        F('group_instance_id', 'string', (3, 4), nullable=(3, 4)),
        F('error_code', 'int16', (3, 4)),
    )),
)
