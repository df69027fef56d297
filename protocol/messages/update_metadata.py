"""UpdateMetadata (key 6), versions 0-5: request and response fields.

Declared from Kafka's UpdateMetadataRequest.json and UpdateMetadataResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case. Version 5 adds the
receiving broker's epoch (KIP-380) and groups the partition states by topic.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.UPDATE_METADATA
NAME = 'UpdateMetadata'
VERSIONS = (0, 5)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None


def _partition_state() -> tuple[F, ...]:
    """UpdateMetadataPartitionState (a common struct): the topic name only where states are not grouped."""
    return (
        F('topic_name', 'string', (0, 4)),
        F('partition_index', 'int32', (0, 5)),
        F('controller_epoch', 'int32', (0, 5)),
        F('leader', 'int32', (0, 5)),
        F('leader_epoch', 'int32', (0, 5)),
        F('isr', '[]int32', (0, 5)),
        F('zk_version', 'int32', (0, 5)),
        F('replicas', '[]int32', (0, 5)),
        F('offline_replicas', '[]int32', (4, 5)),
    )


REQUEST = (
    F('controller_id', 'int32', (0, 5)),
    F('controller_epoch', 'int32', (0, 5)),
    F('broker_epoch', 'int64', (5, 5), default=-1),
    F('ungrouped_partition_states', '[]struct', (0, 4), fields=_partition_state()),
    F('topic_states', '[]struct', (5, 5), fields=(
        F('topic_name', 'string', (5, 5)),
        F('partition_states', '[]struct', (5, 5), fields=_partition_state()),
    )),
    F('live_brokers', '[]struct', (0, 5), fields=(
        F('id', 'int32', (0, 5)),
        F('v0_host', 'string', (0, 0)),
        F('v0_port', 'int32', (0, 0)),
        F('endpoints', '[]struct', (1, 5), fields=(
            F('port', 'int32', (1, 5)),
            F('host', 'string', (1, 5)),
            F('listener', 'string', (3, 5)),
            F('security_protocol', 'int16', (1, 5)),
        )),
        F('rack', 'string', (2, 5), nullable=(0, 5)),
    )),
)

RESPONSE = (
    F('error_code', 'int16', (0, 5)),
)
