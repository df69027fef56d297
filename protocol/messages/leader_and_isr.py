"""LeaderAndIsr (key 4), versions 0-2: request and response fields.

Declared from Kafka's LeaderAndIsrRequest.json and LeaderAndIsrResponse.json; fields that only exist
in later versions are left out. Field names are Kafka's, in snake_case. Version 2 adds the
receiving broker's epoch (KIP-380) and groups the partition states by topic.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.LEADER_AND_ISR
NAME = 'LeaderAndIsr'
VERSIONS = (0, 2)
FLEXIBLE_REQUEST_FROM = None
FLEXIBLE_RESPONSE_FROM = None


def _partition_state(topic_name_versions: tuple[int, int]) -> tuple[F, ...]:
    """LeaderAndIsrPartitionState (a common struct): the topic name only where states are not grouped."""
    return (
        F('topic_name', 'string', topic_name_versions),
        F('partition_index', 'int32', (0, 2)),
        F('controller_epoch', 'int32', (0, 2)),
        F('leader', 'int32', (0, 2)),
        F('leader_epoch', 'int32', (0, 2)),
        F('isr', '[]int32', (0, 2)),
        F('partition_epoch', 'int32', (0, 2)),
        F('replicas', '[]int32', (0, 2)),
        F('is_new', 'bool', (1, 2), default=False),
    )


REQUEST = (
    F('controller_id', 'int32', (0, 2)),
    F('controller_epoch', 'int32', (0, 2)),
    F('broker_epoch', 'int64', (2, 2), default=-1),
    F('ungrouped_partition_states', '[]struct', (0, 1), fields=_partition_state((0, 1))),
    F('topic_states', '[]struct', (2, 2), fields=(
        F('topic_name', 'string', (2, 2)),
        F('partition_states', '[]struct', (2, 2), fields=_partition_state((0, 1))),
    )),
    F('live_leaders', '[]struct', (0, 2), fields=(
        F('broker_id', 'int32', (0, 2)),
        F('host_name', 'string', (0, 2)),
        F('port', 'int32', (0, 2)),
    )),
)

RESPONSE = (
    F('error_code', 'int16', (0, 2)),
    F('partition_errors', '[]struct', (0, 2), fields=(
        F('topic_name', 'string', (0, 2)),
        F('partition_index', 'int32', (0, 2)),
        F('error_code', 'int16', (0, 2)),
    )),
)
