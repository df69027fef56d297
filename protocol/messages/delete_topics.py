"""DeleteTopics (key 20), versions 0-5: request and response fields.

Declared from Kafka's DeleteTopicsRequest.json and DeleteTopicsResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DELETE_TOPICS
NAME = 'DeleteTopics'
VERSIONS = (0, 5)
FLEXIBLE_REQUEST_FROM = 4
FLEXIBLE_RESPONSE_FROM = 4

REQUEST = (
    F('topic_names', '[]string', (0, 5)),
    F('timeout_ms', 'int32', (0, 5)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 5)),
    F('responses', '[]struct', (0, 5), fields=(
        F('name', 'string', (0, 5)),
        F('error_code', 'int16', (0, 5)),
        F('error_message', 'string', (5, 5), nullable=(5, 5), default=None),
    )),
)
