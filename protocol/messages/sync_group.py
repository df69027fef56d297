"""SyncGroup (key 14), versions 0-5: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's SyncGroupRequest.json and SyncGroupResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.SYNC_GROUP
NAME = 'SyncGroup'
VERSIONS = (0, 5)
FLEXIBLE_REQUEST_FROM = 4
FLEXIBLE_RESPONSE_FROM = 4

REQUEST = (
    F('group_id', 'string', (0, 5)),
    F('generation_id', 'int32', (0, 5)),
    F('member_id', 'string', (0, 5)),
    F('group_instance_id', 'string', (3, 5), nullable=(3, 5)),
    F('protocol_type', 'string', (5, 5), nullable=(5, 5)),
    F('protocol_name', 'string', (5, 5), nullable=(5, 5)),
    F('assignments', '[]struct', (0, 5), fields=(
        F('member_id', 'string', (0, 5)),
        F('assignment', 'bytes', (0, 5)),
    )),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 5)),
    F('error_code', 'int16', (0, 5)),
    F('protocol_type', 'string', (5, 5), nullable=(5, 5)),
    F('protocol_name', 'string', (5, 5), nullable=(5, 5)),
    F('assignment', 'bytes', (0, 5)),
)
