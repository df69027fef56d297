"""DeleteTopics (key 20), versions 0-6: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's DeleteTopicsRequest.json and DeleteTopicsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DELETE_TOPICS
NAME = 'DeleteTopics'
VERSIONS = (0, 6)
FLEXIBLE_REQUEST_FROM = 4
FLEXIBLE_RESPONSE_FROM = 4

REQUEST = (
    F('topics', '[]struct', (6, 6), fields=(
        F('name', 'string', (6, 6), nullable=(6, 6)),
        F('topic_id', 'uuid', (6, 6)),
    )),
    F('topic_names', '[]string', (0, 5)),
    F('timeout_ms', 'int32', (0, 6)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (1, 6)),
    F('responses', '[]struct', (0, 6), fields=(
        F('name', 'string', (0, 6), nullable=(6, 6)),
        F('topic_id', 'uuid', (6, 6)),
        F('error_code', 'int16', (0, 6)),
        F('error_message', 'string', (5, 6), nullable=(5, 6)),
    )),
)
