"""broker.metadata.MetadataCache.update: UpdateMetadata applied, illegal names kept out."""

from __future__ import annotations

from typing import Any

from broker.metadata import MetadataCache


def _state(topic: str, index: int, leader: int = 0) -> dict[str, Any]:
    return {"topic_name": topic, "partition_index": index, "controller_epoch": 1, "leader": leader,
            "leader_epoch": 0, "isr": [0], "zk_version": 0, "replicas": [0]}


def test_illegal_names_and_negative_partitions_are_not_cached() -> None:
    cache = MetadataCache()
    cache.update({"controller_id": 0, "controller_epoch": 1,
                  "live_brokers": [{"id": 0, "v0_host": "127.0.0.1", "v0_port": 9092}],
                  "ungrouped_partition_states": [_state("ok", 0), _state("../x", 0), _state("/tmp/x", 0),
                                                 _state("", 0), _state("ok", -1)]})
    assert set(cache.topics) == {"ok"}
    assert set(cache.topics["ok"]) == {0}
    assert cache.brokers[0].port == 9092
