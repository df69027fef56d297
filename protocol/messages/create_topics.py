"""CreateTopics (key 19), versions 0-7: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's CreateTopicsRequest.json and CreateTopicsResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.CREATE_TOPICS
NAME = 'CreateTopics'
VERSIONS = (0, 7)
FLEXIBLE_REQUEST_FROM = 5
FLEXIBLE_RESPONSE_FROM = 5

REQUEST = (
    F('topics', '[]struct', (0, 7), fields=(
        F('name', 'string', (0, 7)),
        F('num_partitions', 'int32', (0, 7)),
        F('replication_factor', 'int16', (0, 7)),
        F('assignments', '[]struct', (0, 7), fields=(
            F('partition_index', 'int32', (0, 7)),
            F('broker_ids', '[]int32', (0, 7)),
        )),
        F('configs', '[]struct', (0, 7), fields=(
            F('name', 'string', (0, 7)),
            F('value', 'string', (0, 7), nullable=(0, 7)),
        )),
    )),
    F('timeout_ms', 'int32', (0, 7), default=60000),
    F('validate_only', 'bool', (1, 7), default=False),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (2, 7)),
    F('topics', '[]struct', (0, 7), fields=(
        F('name', 'string', (0, 7)),
        F('topic_id', 'uuid', (7, 7)),
        F('error_code', 'int16', (0, 7)),
        F('error_message', 'string', (1, 7), nullable=(1, 7)),
        F('topic_config_error_code', 'int16', (5, 7), tag=0),
        F('num_partitions', 'int32', (5, 7), default=-1),
        F('replication_factor', 'int16', (5, 7), default=-1),
        F('configs', '[]struct', (5, 7), nullable=(5, 7), fields=(
            F('name', 'string', (5, 7)),
            F('value', 'string', (5, 7), nullable=(5, 7)),
            F('read_only', 'bool', (5, 7)),
            F('config_source', 'int8', (5, 7), default=-1),
            F('is_sensitive', 'bool', (5, 7)),
        )),
    )),
)
