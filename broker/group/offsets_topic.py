"""`__consumer_offsets` as the group coordinator's store (broker.group.store.GroupStore).

Which partition owns a group: Kafka's `partitionFor` over the topic's partition count. As
Kafka's GroupMetadataManager, the count is the existing topic's (read from its znode at
start-up), else `offsets.topic.num.partitions`; a topic that appears later (created by any
broker) fixes it to its own count the first time this broker's metadata shows it, and it never
changes after that (partitions added to the topic later are not used, as in Kafka).
"""

from __future__ import annotations

import structlog

from broker.config import BrokerConfig
from broker.group.store import OFFSETS_TOPIC, partition_for
from broker.metadata import MetadataCache
from broker.zk import layout as L
from broker.zk.client import NoNodeError, ZkClient

log = structlog.get_logger()


class OffsetsTopic:
    """The GroupStore of this broker (see the module docstring)."""

    def __init__(self, config: BrokerConfig, zk: ZkClient, metadata: MetadataCache) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.zk = zk
        self.metadata = metadata
        self._partition_count = config.offsets_topic_num_partitions
        self._count_fixed = False

    async def read_partition_count(self) -> None:
        """At start-up: an existing topic's partition count wins over the configured one."""
        try:
            data, _ = await self.zk.get(L.topic_path(OFFSETS_TOPIC))
            self._fix_count(L.assignment_shape(data).partitions)
        except NoNodeError:
            pass
        except ValueError:
            log.warning("offsets_topic.bad_topic_znode", broker_id=self.broker_id)

    def _fix_count(self, count: int) -> None:
        if count != self._partition_count:
            log.warning("offsets_topic.partition_count_differs", broker_id=self.broker_id, partitions=count,
                        configured=self.config.offsets_topic_num_partitions)
        self._partition_count = count
        self._count_fixed = True

    @property
    def partition_count(self) -> int:
        if not self._count_fixed:
            parts = self.metadata.topics.get(OFFSETS_TOPIC)
            if parts:
                self._fix_count(len(parts))
        return self._partition_count

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)
