"""CreateTopics (key 19), versions 0-6: request and response fields.

Declared from Kafka's CreateTopicsRequest.json and CreateTopicsResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.CREATE_TOPICS
NAME = 'CreateTopics'
VERSIONS = (0, 6)
FLEXIBLE_REQUEST_FROM = 5
FLEXIBLE_RESPONSE_FROM = 5

REQUEST = (
    F('topics', '[]struct', (0, 6), fields=(
        F('name', 'string', (0, 6)),
        F('num_partitions', 'int32', (0, 6)),
        F('replication_factor', 'int16', (0, 6)),
        F('assignments', '[]struct', (0, 6), fields=(
            F('partition_index', 'int32', (0, 6)),
            F('broker_ids', '[]int32', (0, 6)),
        )),
        F('configs', '[]struct', (0, 6), fields=(
            F('name', 'string', (0, 6)),
            F('value', 'string', (0, 6), nullable=(0, 6)),
        )),
    )),
    F('timeout_ms', 'int32', (0, 6), default=60000),
    F('validate_only', 'bool', (1, 6), default=False),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (2, 6)),
    F('topics', '[]struct', (0, 6), fields=(
        F('name', 'string', (0, 6)),
        F('error_code', 'int16', (0, 6)),
        F('error_message', 'string', (1, 6), nullable=(0, 6)),
        F('topic_config_error_code', 'int16', (5, 6), tag=0),
        F('num_partitions', 'int32', (5, 6), default=-1),
        F('replication_factor', 'int16', (5, 6), default=-1),
        F('configs', '[]struct', (5, 6), nullable=(5, 6), fields=(
            F('name', 'string', (5, 6)),
            F('value', 'string', (5, 6), nullable=(5, 6)),
            F('read_only', 'bool', (5, 6)),
            F('config_source', 'int8', (5, 6), default=-1),
            F('is_sensitive', 'bool', (5, 6)),
        )),
    )),
)
