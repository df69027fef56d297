"""Kafka's internal topics on the request path: how `__consumer_offsets` is created.

As Kafka 2.8's AutoTopicCreationManager.creatableTopic: `offsets.topic.num.partitions`
partitions, `offsets.topic.replication.factor` replicas (lowered to the live brokers' count with
a warning, broker.apis.admin.Admin.create_internal_topic) and GroupCoordinator.offsetsTopicConfigs
(`cleanup.policy=compact`, `segment.bytes=offsets.topic.segment.bytes`,
`compression.type=producer`). FindCoordinator creates it on first use, and so does a Metadata
request naming it when auto-creation is allowed, as in Kafka: either way only with these
settings, never as an ordinary topic. `__transaction_state` is never created: there is no
transaction coordinator.
"""

from __future__ import annotations

import structlog

from broker.apis.admin import AdminError
from broker.apis.context import BrokerServices
from broker.config import BrokerConfig
from broker.zk.client import ZkError
from protocol.errors import ErrorCode
from protocol.topic import GROUP_METADATA_TOPIC_NAME

log = structlog.get_logger()


def offsets_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """GroupCoordinator.offsetsTopicConfigs."""
    return {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes),
            "compression.type": "producer"}


async def create_offsets_topic(services: BrokerServices) -> ErrorCode:
    """Create `__consumer_offsets` (an existing one is left as it is). NONE when it was created or
    exists; else the reason, logged: the caller answers as if it were still being created."""
    config = services.config
    try:
        await services.admin.create_internal_topic(GROUP_METADATA_TOPIC_NAME, config.offsets_topic_num_partitions,
                                                   config.offsets_topic_replication_factor,
                                                   offsets_topic_configs(config))
    except AdminError as e:
        log.warning("offsets_topic.create_failed", broker_id=services.broker_id, error_code=e.code.name,
                    error=e.message)
        return e.code
    except ZkError as e:
        log.warning("offsets_topic.create_failed", broker_id=services.broker_id, error=str(e))
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.NONE
