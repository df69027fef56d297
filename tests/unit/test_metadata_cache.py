"""broker.metadata.MetadataCache.update: UpdateMetadata applied, illegal names kept out."""

from __future__ import annotations

from typing import Any

from broker.metadata import MetadataCache
from protocol.errors import ErrorCode


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


def _two_listener_cache() -> MetadataCache:
    """Broker 0 has INTERNAL and EXTERNAL endpoints, broker 1 only INTERNAL; broker 2 is not alive."""
    cache = MetadataCache(inter_broker_listener="INTERNAL")

    def ep(listener: str, port: int) -> dict[str, Any]:
        return {"port": port, "host": "h", "listener": listener, "security_protocol": 0}

    cache.update({"controller_id": 0, "controller_epoch": 1,
                  "live_brokers": [{"id": 0, "endpoints": [ep("INTERNAL", 1), ep("EXTERNAL", 2)]},
                                   {"id": 1, "endpoints": [ep("INTERNAL", 3)]}],
                  "ungrouped_partition_states": [
                      {**_state("t", 0, leader=0), "isr": [0, 1], "replicas": [0, 1]},
                      {**_state("t", 1, leader=1), "isr": [1, 0], "replicas": [1, 0]},
                      {**_state("t", 2, leader=2), "isr": [2], "replicas": [2, 0]}]})
    return cache


def test_a_leader_without_the_clients_listener_is_listener_not_found_from_v6() -> None:
    cache = _two_listener_cache()
    by_index = {p["partition_index"]: p for p in cache.partition_metadata("t", "EXTERNAL", 6)}
    assert (by_index[0]["error_code"], by_index[0]["leader_id"]) == (ErrorCode.NONE, 0)
    assert (by_index[1]["error_code"], by_index[1]["leader_id"]) == (ErrorCode.LISTENER_NOT_FOUND, -1)
    assert (by_index[2]["error_code"], by_index[2]["leader_id"]) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
    old = {p["partition_index"]: p for p in cache.partition_metadata("t", "EXTERNAL", 5)}
    assert (old[1]["error_code"], old[1]["leader_id"]) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
    on_internal = {p["partition_index"]: p for p in cache.partition_metadata("t", "INTERNAL", 6)}
    assert (on_internal[1]["error_code"], on_internal[1]["leader_id"]) == (ErrorCode.NONE, 1)


def test_v0_lists_only_replicas_reachable_on_the_listener() -> None:
    cache = _two_listener_cache()
    p0 = cache.partition_metadata("t", "EXTERNAL", 0)[0]
    assert (p0["error_code"], p0["replica_nodes"], p0["isr_nodes"]) == (ErrorCode.REPLICA_NOT_AVAILABLE, [0], [0])
    p0v1 = cache.partition_metadata("t", "EXTERNAL", 1)[0]
    assert (p0v1["error_code"], p0v1["replica_nodes"]) == (ErrorCode.NONE, [0, 1])
