"""ControlledShutdown (key 7), versions 0-2: request and response fields.

Declared from Kafka's ControlledShutdownRequest.json and ControlledShutdownResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case. Version 2 adds the
shutting-down broker's epoch (KIP-380).
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.CONTROLLED_SHUTDOWN
NAME = 'ControlledShutdown'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None

REQUEST = (
    F('broker_id', 'int32', (0, 2)),
    F('broker_epoch', 'int64', (2, 2), default=-1),
)

RESPONSE = (
    F('error_code', 'int16', (0, 2)),
    F('remaining_partitions', '[]struct', (0, 2), fields=(
        F('topic_name', 'string', (0, 2)),
        F('partition_index', 'int32', (0, 2)),
    )),
)
