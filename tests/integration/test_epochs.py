"""Controller requests from anyone but the controller, and the controller's own death (issue 15).

KIP-380: LeaderAndIsr, StopReplica and UpdateMetadata are obeyed only with the receiving
broker's current epoch (its registration's czxid) and ZooKeeper's controller epoch;
ControlledShutdown only with the named broker's own epoch. Each test is one reproduction
of the probe's findings, sent by a plain client on a real socket.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.zk.client import ZkClient
from broker.zk.server import ZooKeeperServer
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records.message_set import build_message_set
from tests.support.brokers import BrokerProcess, start_together
from tests.support.cluster import FAST, Cluster
from tests.support.wire import connect, fetch, produce

pytestmark = pytest.mark.integration

FORGED_EPOCH = 2**31 - 1


async def _broker_epoch(cluster: Cluster, broker_id: int) -> int:
    return await cluster.zk.czxid(f"/brokers/ids/{broker_id}")


async def _controller_epoch(cluster: Cluster) -> int:
    data, _ = await cluster.zk.get("/controller_epoch")
    return int(data)


def _partition_state(topic: str, leader: int, replicas: list[int], leader_epoch: int) -> dict:
    return {"topic_name": topic, "partition_index": 0, "controller_epoch": FORGED_EPOCH, "leader": leader,
            "leader_epoch": leader_epoch, "isr": [leader], "partition_epoch": 0, "replicas": replicas}


async def _leads(cluster: Cluster, broker_id: int, topic: str, acks: int = 1) -> bool:
    """The broker itself accepts a produce to partition 0 of `topic` (it really leads it)."""
    async with await connect(cluster.by_id(broker_id).bootstrap) as conn:
        return (await produce(conn, topic, 0, [(b"k", b"v")], acks=acks))["error_code"] == 0


async def _wait_leads(cluster: Cluster, broker_id: int, topic: str, acks: int = 1) -> None:
    # Other brokers' metadata may name the leader a moment before the leader has heard it leads.
    await cluster.wait_for(f"broker {broker_id} leading {topic}-0", lambda: _leads(cluster, broker_id, topic, acks),
                           timeout=15)


async def test_forged_leader_and_isr_with_max_controller_epoch_is_refused(cluster: Cluster) -> None:
    controller = await cluster.controller()
    target = next(b for b in (0, 1, 2) if b != controller)
    others = [b for b in (0, 1, 2) if b != target]
    async with await connect(cluster.by_id(target).bootstrap) as conn:
        # As the probe sent it: the version served before broker epochs (no epoch in it).
        old = {"controller_id": others[0], "controller_epoch": FORGED_EPOCH, "live_leaders": [],
               "ungrouped_partition_states": [_partition_state("forged", target, [target], 0)]}
        resp = await conn.request(ApiKey.LEADER_AND_ISR, 0, old)
        assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        # The current version, even with the target's real broker epoch: the controller epoch is not ZooKeeper's.
        new = {"controller_id": others[0], "controller_epoch": FORGED_EPOCH,
               "broker_epoch": await _broker_epoch(cluster, target), "live_leaders": [],
               "topic_states": [{"topic_name": "forged", "partition_states": [
                   _partition_state("forged", target, [target], 0)]}]}
        resp = await conn.request(ApiKey.LEADER_AND_ISR, 2, new)
        assert resp["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
        # A forged broker epoch higher than the real one is not trusted either.
        resp = await conn.request(ApiKey.LEADER_AND_ISR, 2, {**new, "broker_epoch": 2**63 - 1,
                                                             "controller_epoch": await _controller_epoch(cluster)})
        assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert not (cluster.by_id(target).log_dir / "forged-0").exists()
    # The real controller is still obeyed: a topic created afterwards gets its leader on the target.
    await cluster.create_topic("after", assignment={0: [target]})
    await _wait_leads(cluster, target, "after")


async def test_controlled_shutdown_naming_another_broker_changes_no_isr(cluster: Cluster) -> None:
    await cluster.create_topic("cs", 3, 3)
    for p in range(3):
        await cluster.wait_isr("cs", p, {0, 1, 2})
    before = [await cluster.state("cs", p) for p in range(3)]
    controller = await cluster.controller()
    victim = next(b for b in (0, 1, 2) if b != controller)
    real = await _broker_epoch(cluster, victim)
    async with await connect(cluster.by_id(controller).bootstrap) as conn:
        # The controller answers only after acting, so the state znodes below show any effect.
        resp = await conn.request(ApiKey.CONTROLLED_SHUTDOWN, 1, {"broker_id": victim})
        assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        for wrong in (-1, real - 1, real + 1, await _broker_epoch(cluster, controller)):
            resp = await conn.request(ApiKey.CONTROLLED_SHUTDOWN, 2, {"broker_id": victim, "broker_epoch": wrong})
            assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH, wrong
            assert resp["remaining_partitions"] == []
    assert [await cluster.state("cs", p) for p in range(3)] == before


async def test_requests_with_a_broker_epoch_from_before_a_restart_change_nothing(cluster: Cluster) -> None:
    controller = await cluster.controller()
    target = next(b for b in (0, 1, 2) if b != controller)
    leader = next(b for b in (0, 1, 2) if b not in (controller, target))
    await cluster.create_topic("kept", assignment={0: [leader, target]})
    await cluster.wait_isr("kept", 0, {leader, target})
    await _wait_leads(cluster, leader, "kept", acks=-1)
    stale = await _broker_epoch(cluster, target)
    b = cluster.by_id(target)
    assert b.stop() == 0
    b.start()
    await cluster.wait_isr("kept", 0, {leader, target})
    assert await _broker_epoch(cluster, target) > stale
    epoch = await _controller_epoch(cluster)
    async with await connect(b.bootstrap) as conn:
        # The version served before broker epochs, then the current one with the earlier incarnation's epoch.
        resp = await conn.request(ApiKey.STOP_REPLICA, 0, {
            "controller_id": controller, "controller_epoch": epoch, "delete_partitions": True,
            "ungrouped_partitions": [{"topic_name": "kept", "partition_index": 0}]})
        assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        resp = await conn.request(ApiKey.STOP_REPLICA, 1, {
            "controller_id": controller, "controller_epoch": epoch, "broker_epoch": stale, "delete_partitions": True,
            "topics": [{"name": "kept", "partition_indexes": [0]}]})
        assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        # Make the follower a leader of its own, with a leader epoch above the real one.
        resp = await conn.request(ApiKey.LEADER_AND_ISR, 2, {
            "controller_id": controller, "controller_epoch": epoch, "broker_epoch": stale, "live_leaders": [],
            "topic_states": [{"topic_name": "kept", "partition_states": [
                _partition_state("kept", target, [leader, target], 1000)]}]})
        assert resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        assert (await produce(conn, "kept", 0, [(b"k", b"x")]))["error_code"] == ErrorCode.NOT_LEADER_FOR_PARTITION
        got = await fetch(conn, [("kept", 0, 0, 1 << 20)])
        assert got[("kept", 0)]["error_code"] == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert (b.log_dir / "kept-0").is_dir()
    # Still a replica in step with its leader: a new acks=all write needs it and completes.
    async with await connect(cluster.by_id(leader).bootstrap) as conn:
        assert (await produce(conn, "kept", 0, [(b"k", b"after")], acks=-1))["error_code"] == 0
    assert set((await cluster.state("kept", 0))["isr"]) == {leader, target}


LAG_MS = 20_000


@pytest.fixture
async def slow_lag_cluster(tmp_path: Path, zk_server: ZooKeeperServer) -> AsyncIterator[Cluster]:
    """Three brokers whose leaders would drop a dead follower only after 20 s (replica.lag.time.max.ms)."""
    props = {**FAST, "replica.lag.time.max.ms": str(LAG_MS), "zookeeper.session.timeout.ms": "4000"}
    brokers = [BrokerProcess(tmp_path, i, zk_server.connect_string, props) for i in range(3)]
    c = Cluster(brokers, ZkClient(zk_server.connect_string, 6000))
    try:
        start_together(brokers)
        await c.zk.start()
        await c.wait_for("3 brokers and a controller", lambda: _registered(c))
        yield c
    finally:
        await c.close()


async def _registered(c: Cluster) -> bool:
    return len(await c.zk.get_children("/brokers/ids")) == 3 and await c.zk.exists("/controller")


async def test_new_controller_removes_the_dead_controller_from_isrs_led_elsewhere(slow_lag_cluster: Cluster) -> None:
    cluster = slow_lag_cluster
    controller = await cluster.controller()
    leader, other = [b for b in (0, 1, 2) if b != controller]
    await cluster.create_topic("led", assignment={0: [leader, controller, other]})
    await cluster.wait_isr("led", 0, {0, 1, 2})
    await _wait_leads(cluster, leader, "led", acks=-1)
    body = {"acks": -1, "timeout_ms": 60_000, "topic_data": [{"name": "led", "partition_data": [
        {"index": 0, "records": build_message_set([(b"k", b"v%d" % i, 1_700_000_000_000) for i in range(5)],
                                                  magic=1)}]}]}
    async with await connect(cluster.by_id(leader).bootstrap) as conn:
        resp = await conn.request(ApiKey.PRODUCE, 2, body)
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        cluster.by_id(controller).kill()
        killed = time.monotonic()
        resp = await conn.request(ApiKey.PRODUCE, 2, body, timeout=90)
        took = time.monotonic() - killed
    assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert controller not in (await cluster.state("led", 0))["isr"]
    assert await cluster.controller() != controller
    # Liveness, not speed: the ack waited for the ZooKeeper session (4 s) and the election, not for the
    # leader's lag rule (20 s), which alone removed the dead controller before the fix.
    assert took < LAG_MS / 1000 / 2, took
