"""broker.replication.roles.PartitionRoles.forget_deleted_topics with broker.zk.topic_configs.TopicConfigs:
a deleted topic's cached configs go once no partition of it is left here (stubbed ZooKeeper and replicas)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from broker.replication.roles import PartitionRoles
from broker.zk.client import NoNodeError
from broker.zk.topic_configs import TopicConfigs


class StubZk:
    def __init__(self) -> None:
        self.reads: list[str] = []

    async def get(self, path: str) -> tuple[bytes, int]:
        self.reads.append(path)
        raise NoNodeError(path)


def _roles(partitions: dict[tuple[str, int], Any], configs: TopicConfigs) -> PartitionRoles:
    roles = PartitionRoles.__new__(PartitionRoles)  # only the two collaborators this method uses
    roles.replicas = SimpleNamespace(partitions=partitions)  # type: ignore[assignment]
    roles.topic_configs = configs
    return roles


async def test_configs_of_deleted_topics_are_forgotten() -> None:
    zk = StubZk()
    configs = TopicConfigs(zk)  # type: ignore[arg-type]
    for i in range(100):
        configs.set(f"gone-{i}", {"segment.bytes": "1024"})
    configs.set("kept", {"segment.bytes": "2048"})
    partitions = {("kept", 1): object()}  # "kept" still has a partition here; its partition 0 was deleted
    _roles(partitions, configs).forget_deleted_topics({f"gone-{i}" for i in range(100)} | {"kept"})
    assert set(configs._configs) == {"kept"}
    assert await configs.get("kept") == {"segment.bytes": "2048"}
    assert zk.reads == []
    # A name that comes back is read afresh, not served the old topic's configs.
    assert await configs.get("gone-3") == {}
    assert zk.reads == ["/config/topics/gone-3"]
