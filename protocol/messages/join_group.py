"""JoinGroup (key 11), versions 0-7: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's JoinGroupRequest.json and JoinGroupResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.JOIN_GROUP
NAME = 'JoinGroup'
VERSIONS = (0, 7)
FLEXIBLE_REQUEST_FROM = 6
FLEXIBLE_RESPONSE_FROM = 6

REQUEST = (
    F('group_id', 'string', (0, 7)),
    F('session_timeout_ms', 'int32', (0, 7)),
    F('rebalance_timeout_ms', 'int32', (1, 7), default=-1),
    F('member_id', 'string', (0, 7)),
    F('group_instance_id', 'string', (5, 7), nullable=(5, 7)),
    F('protocol_type', 'string', (0, 7)),
    F('protocols', '[]struct', (0, 7), fields=(
        F('name', 'string', (0, 7)),
        F('metadata', 'bytes', (0, 7)),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (2, 7)),
    F('error_code', 'int16', (0, 7)),
    F('generation_id', 'int32', (0, 7), default=-1),
    F('protocol_type', 'string', (7, 7), nullable=(7, 7)),
    F('protocol_name', 'string', (0, 7), nullable=(7, 7)),
    F('leader', 'string', (0, 7)),
    F('member_id', 'string', (0, 7)),
    F('members', '[]struct', (0, 7), fields=(
        F('member_id', 'string', (0, 7)),
        F('group_instance_id', 'string', (5, 7), nullable=(5, 7)),
        F('metadata', 'bytes', (0, 7)),
    )),
)
