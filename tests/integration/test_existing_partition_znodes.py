"""New partitions whose znodes exist already, on real brokers and a real ZooKeeper.

The controller writes a new partition's `partitions/<n>` and `partitions/<n>/state` znodes
256 partitions a ZooKeeper multi-op (ZkClient.create_all); a multi that fails because one of its
znodes exists is written again one partition at a time (Controller._bring_online). These tests
make such znodes exist before the partitions are created and check the outcome: every partition
led by a broker that knows it leads (a produce with acks=all succeeds), every state znode there
and right, and the ones found there handled as Kafka 2.8's controller handles a state it reads
(ControllerContext after a failover: kept while its leader is alive, else a new leader elected
from it) when they could be their assignment's (leader assigned or none, ISR within the
replicas); any other is a leftover of another assignment and is replaced by the first state
Kafka would have written (broker.controller.first_state). Kafka's controller at creation only
logs a failed state change for such a partition and leaves it without a leader until the next
controller failover.

With CreateTopics no znode of the batch can exist first: they all live under the topic's own
znode, and a topic whose znode exists is refused TOPIC_ALREADY_EXISTS (as Kafka's
AdminZkClient.validateTopicCreate does). CreatePartitions writes into an existing topic, so it is
the request that meets them; a controller failing over meets them too. A state written between
the controller's read of a new topic and its multi-op (another writer) is made to happen with the
controller in-process, its multi preceded by the other writer's creates.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.controller.context import TP
from broker.controller.controller import Controller
from broker.zk import layout as L
from broker.zk.server import ZooKeeperServer
from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records.message_set import decode_records
from tests.support.cluster import Cluster
from tests.support.topics import create_topic, wait_leaders
from tests.support.waiting import wait_for
from tests.support.wire import connect, fetch, produce
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.integration

TOPIC = "grow"


async def _leaders(conn: KafkaConnection, topic: str) -> dict[int, int]:
    md = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
    return {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]}


async def _state(cluster: Cluster, topic: str, partition: int) -> L.PartitionState:
    data, _ = await cluster.zk.get(L.partition_state_path(topic, partition))
    return L.PartitionState.decode(data)


async def _produce_to_every_leader(cluster: Cluster, topic: str, partitions: int) -> None:
    """acks=all to each partition's leader as every broker's Metadata names it: the leaders
    all know they lead, and the followers in the ISR fetch."""
    for b in cluster.brokers:
        async with await connect(b) as conn:
            try:
                await wait_leaders(conn, topic, partitions, 30)
            except TimeoutError:
                raise AssertionError(f"broker {b.broker_id}'s leaders of {topic}: {await _leaders(conn, topic)}") from None
    async with await connect(cluster) as conn:
        leaders = await _leaders(conn, topic)
    assert sorted(leaders) == list(range(partitions))
    for p, leader in leaders.items():
        async with await connect(cluster.by_id(leader)) as conn:
            got = await produce(conn, topic, p, [(None, f"m{p}".encode())], acks=-1)
        assert got["error_code"] == 0, (p, got)


async def test_create_partitions_over_existing_znodes(cluster: Cluster) -> None:
    zk = cluster.zk
    await create_topic(cluster, TOPIC, assignment={0: [0, 1], 1: [1, 2]})
    # Partition 2: its `partitions/2` znode alone (a Kafka controller, which creates it and the
    # state in separate requests, died between them): the window's multi fails on it, and the
    # state is written one by one.
    await zk.create(L.partition_path(TOPIC, 2), b"")
    # Partition 3: a state whose leader is alive: kept as it is.
    kept = L.PartitionState(leader=1, leader_epoch=4, controller_epoch=1, isr=[1, 2])
    await zk.create(L.partition_state_path(TOPIC, 3), kept.encode(), make_parents=True)
    # Partition 4: a state whose leader (9) never lived nor is assigned: a leftover of another
    # assignment, replaced by the first state (0 leads, both assigned replicas in the ISR).
    gone = L.PartitionState(leader=9, leader_epoch=6, controller_epoch=1, isr=[9, 0])
    await zk.create(L.partition_state_path(TOPIC, 4), gone.encode(), make_parents=True)

    async with await connect(cluster) as conn:
        body = {"topics": [{"name": TOPIC, "count": 5,
                            "assignments": [{"broker_ids": [0, 1]}, {"broker_ids": [1, 2]}, {"broker_ids": [0, 2]}]}],
                "timeout_ms": 10000, "validate_only": False}
        resp = await conn.request(ApiKey.CREATE_PARTITIONS, 1, body)
        assert resp["results"][0]["error_code"] == 0, resp

    await _produce_to_every_leader(cluster, TOPIC, 5)
    controller = cluster.by_id(await cluster.controller())
    assert "controller.first_states_one_by_one" in controller.log_path.read_text()  # the multi failed, as meant

    assert sorted(await zk.get_children(L.partitions_path(TOPIC)), key=int) == ["0", "1", "2", "3", "4"]
    for p in range(5):
        assert await zk.get_children(L.partition_path(TOPIC, p)) == ["state"]
    first = await _state(cluster, TOPIC, 2)
    assert (first.leader, first.leader_epoch) == (0, 0)
    assert set(first.isr) <= {0, 1} and 0 in first.isr
    adopted = await _state(cluster, TOPIC, 3)
    assert (adopted.leader, adopted.leader_epoch) == (1, 4)
    elected = await _state(cluster, TOPIC, 4)
    assert (elected.leader, elected.leader_epoch, elected.isr) == (0, 7, [0, 2])
    async with await connect(cluster) as conn:
        assert (await _leaders(conn, TOPIC))[3] == 1


async def test_create_topic_under_an_existing_znode_is_refused(cluster: Cluster) -> None:
    """A state znode made first makes the topic's znode as its parent: CreateTopics says the topic
    exists and writes nothing; the znodes stay as they were."""
    zk = cluster.zk
    stray = L.PartitionState(leader=0, leader_epoch=3, controller_epoch=1, isr=[0])
    await zk.create(L.partition_state_path("early", 0), stray.encode(), make_parents=True)
    result = await create_topic(cluster, "early", 2, 1, check=False, timeout=5)
    assert result["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS, result
    assert (await zk.get(L.topic_path("early")))[0] == b""
    assert await zk.get_children(L.partitions_path("early")) == ["0"]
    assert json.loads((await zk.get(L.partition_state_path("early", 0)))[0]) == json.loads(stray.encode())
    # Another topic is created as usual meanwhile.
    await create_topic(cluster, "later", 3, 2)


async def test_a_controller_finds_a_topic_half_made(broker_factory, zk_server: ZooKeeperServer) -> None:  # noqa: ANN001
    """A topic whose creation the last controller left half done (Kafka's own controller makes
    `partitions/<n>` and its state in separate requests): the next controller's failover makes
    the missing states, one by one once its multi fails, keeps the one there, and leads all."""
    async with zk_connect(zk_server) as zk:
        await zk.create(L.topic_path("half"), L.encode_assignment({0: [0], 1: [0], 2: [0]}), make_parents=True)
        await zk.create(L.partition_path("half", 1), b"", make_parents=True)
        kept = L.PartitionState(leader=0, leader_epoch=5, controller_epoch=1, isr=[0])
        await zk.create(L.partition_state_path("half", 2), kept.encode(), make_parents=True)
        b = broker_factory(0)
        async with await connect(b) as conn:
            await wait_leaders(conn, "half", 3, 30)
            for p in range(3):
                got = await produce(conn, "half", p, [(None, b"x")], acks=-1)
                assert got["error_code"] == 0, (p, got)
        states = {p: L.PartitionState.decode((await zk.get(L.partition_state_path("half", p)))[0]) for p in range(3)}
        assert [(st.leader, st.leader_epoch, st.isr) for st in states.values()] == [(0, 0, [0]), (0, 0, [0]), (0, 5, [0])]
        assert "controller.first_states_one_by_one" in b.log_path.read_text()


async def test_a_leftover_state_of_another_assignment_is_replaced(cluster: Cluster) -> None:
    """States left by another incarnation of the partitions (a leader that is not assigned, broker
    7 that never existed; an ISR member that is not assigned) are not adopted: each partition comes
    up led by its first live assigned replica, with its live assigned replicas as ISR and the next
    leader epoch, is produced to and consumed from, and the controller says what it replaced."""
    zk = cluster.zk
    topic = "again"
    await create_topic(cluster, topic, assignment={0: [0, 1]})
    nobody = L.PartitionState(leader=7, leader_epoch=12, controller_epoch=1, isr=[7])
    await zk.create(L.partition_state_path(topic, 1), nobody.encode(), make_parents=True)
    # Broker 2 is alive and assigned to partition 2, but 0 in its ISR is not.
    outsider = L.PartitionState(leader=2, leader_epoch=3, controller_epoch=1, isr=[2, 0])
    await zk.create(L.partition_state_path(topic, 2), outsider.encode(), make_parents=True)

    async with await connect(cluster) as conn:
        body = {"topics": [{"name": topic, "count": 3, "assignments": [{"broker_ids": [2, 0]}, {"broker_ids": [1, 2]}]}],
                "timeout_ms": 10000, "validate_only": False}
        resp = await conn.request(ApiKey.CREATE_PARTITIONS, 1, body)
        assert resp["results"][0]["error_code"] == 0, resp

    await _produce_to_every_leader(cluster, topic, 3)
    replaced = {p: await _state(cluster, topic, p) for p in (1, 2)}
    assert [(st.leader, st.leader_epoch, st.isr) for st in replaced.values()] == [(2, 13, [2, 0]), (1, 4, [1, 2])]
    assert all(st.controller_epoch >= 1 for st in replaced.values())
    async with await connect(cluster) as conn:
        assert await _leaders(conn, topic) == {0: 0, 1: 2, 2: 1}

    # Consumed from each leader: what the produce above wrote, and what is produced now.
    for p, leader in ((1, 2), (2, 1)):
        async with await connect(cluster.by_id(leader)) as conn:
            got = await produce(conn, topic, p, [(b"k", f"after-{p}".encode())], acks=-1)
            assert got["error_code"] == 0 and got["base_offset"] == 1, (p, got)
            fetched = (await fetch(conn, [(topic, p, 0, 1 << 20)]))[(topic, p)]
        assert fetched["error_code"] == 0 and fetched["high_watermark"] == 2, (p, fetched)
        assert [r.value for r in decode_records(fetched["records"])] == [f"m{p}".encode(), f"after-{p}".encode()]

    controller = cluster.by_id(await cluster.controller())
    events = [line for line in controller.log_path.read_text().splitlines() if "controller.stale_state_replaced" in line]
    assert len(events) == 2, events
    assert all(f"broker_id={controller.broker_id}" in line and "topic='again'" in line for line in events), events
    assert any("partition=1" in line and "stale_leader=7" in line and "stale_isr=[7]" in line for line in events), events
    assert any("partition=2" in line and "stale_leader=2" in line and "stale_isr=[2, 0]" in line for line in events), events


# ---- the controller alone, in-process, on a real ZooKeeper --------------------------------


async def test_create_all_is_all_or_nothing(zk_server: ZooKeeperServer) -> None:
    async with zk_connect(zk_server) as zk:
        await zk.ensure_path("/batch")
        await zk.create("/batch/y", b"first")
        nodes = [("/batch/x", b"1"), ("/batch/y", b"2"), ("/batch/z", b"3")]
        assert await zk.create_all(nodes) is False
        assert sorted(await zk.get_children("/batch")) == ["y"]  # neither x nor z made
        assert (await zk.get("/batch/y"))[0] == b"first"
        await zk.delete("/batch/y")
        assert await zk.create_all(nodes) is True
        assert [(await zk.get(path))[0] for path, _ in nodes] == [b"1", b"2", b"3"]


async def test_states_written_between_the_read_and_the_multi(zk_server: ZooKeeperServer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer makes two of a new topic's state znodes after the controller read the topic
    and before its multi-op: the multi fails whole, the states are created one by one, and the
    two found are handled as read ones are (a live leader kept; a leader neither alive nor
    assigned replaced by the first state, with the next leader epoch); every partition is sent
    to its broker."""
    async with zk_connect(zk_server) as zk, zk_connect(zk_server) as other:
        for path in L.PERSISTENT_PATHS:
            await zk.ensure_path(path)
        # Broker 0 registered (nothing listens at its port: the requests sent to it are recorded here).
        await zk.create(L.broker_path(0), L.BrokerInfo(0, "127.0.0.1", 9).encode(), ephemeral=True)
        controller = Controller(zk, broker_id=0)
        sent: list[tuple[str, int, list[TP]]] = []
        monkeypatch.setattr(controller.ctx, "send_leader_and_isr",
                            lambda b, tps: sent.append(("leader_and_isr", b, list(tps))))
        monkeypatch.setattr(controller.ctx, "send_update_metadata",
                            lambda bs, tps, deleting=False: sent.append(("update_metadata", -1, list(tps))))
        real_create_all = zk.create_all
        raced = asyncio.Event()

        async def racing_create_all(nodes: list[tuple[str, bytes]], guard: tuple[str, int] | None = None) -> bool:
            if any(path.startswith(L.topic_path("race") + "/") for path, _ in nodes) and not raced.is_set():
                raced.set()
                live = L.PartitionState(leader=0, leader_epoch=3, controller_epoch=1, isr=[0])
                dead = L.PartitionState(leader=5, leader_epoch=2, controller_epoch=1, isr=[5, 0])
                await other.create(L.partition_state_path("race", 1), live.encode(), make_parents=True)
                await other.create(L.partition_state_path("race", 2), dead.encode(), make_parents=True)
            return await real_create_all(nodes, guard)

        monkeypatch.setattr(zk, "create_all", racing_create_all)
        await controller.start()
        try:
            await wait_for("controller elected", lambda: controller.active, 10)
            sent.clear()
            await zk.create(L.topic_path("race"), L.encode_assignment({0: [0], 1: [0], 2: [0]}))
            await wait_for("three states", lambda: all(("race", p) in controller.ctx.states for p in range(3)), 10)
            await wait_for("sent", lambda: any(kind == "update_metadata" for kind, _, _ in sent), 10)
            assert raced.is_set()
        finally:
            await controller.stop()
        states = {p: L.PartitionState.decode((await zk.get(L.partition_state_path("race", p)))[0]) for p in range(3)}
        assert states[0] == L.PartitionState(0, 0, controller.ctx.epoch, [0])
        assert states[1] == L.PartitionState(0, 3, 1, [0])
        assert (states[2].leader, states[2].leader_epoch, states[2].isr) == (0, 3, [0])
        assert {p: controller.ctx.states[("race", p)][0] for p in range(3)} == states
        assert sorted(tp for kind, b, tps in sent if kind == "leader_and_isr" and b == 0 for tp in tps) == [
            ("race", 0), ("race", 1), ("race", 2)]
        assert sorted(tp for kind, _, tps in sent if kind == "update_metadata" for tp in tps) == [
            ("race", 0), ("race", 1), ("race", 2)]


@pytest.mark.parametrize("path", ["multi", "one_by_one"])
async def test_a_superseded_controller_creates_no_first_state(zk_server: ZooKeeperServer,
                                                              monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Another controller's election moves `/controller_epoch` while this one still thinks it
    leads: its first states for a new topic are fenced (as its sets are, and Kafka's creates),
    whether by the multi-op or by the one-by-one creates after a multi that failed."""
    async with zk_connect(zk_server) as zk, zk_connect(zk_server) as other:
        for p in L.PERSISTENT_PATHS:
            await zk.ensure_path(p)
        await zk.create(L.broker_path(0), L.BrokerInfo(0, "127.0.0.1", 9).encode(), ephemeral=True)
        controller = Controller(zk, broker_id=0)
        sent: list[list[TP]] = []
        monkeypatch.setattr(controller.ctx, "send_leader_and_isr", lambda b, tps: sent.append(list(tps)))
        monkeypatch.setattr(controller.ctx, "send_update_metadata",
                            lambda bs, tps, deleting=False: sent.append(list(tps)))

        async def elect_another() -> None:  # as a new controller's election writes it
            data, version = await other.get(L.CONTROLLER_EPOCH)
            await other.set(L.CONTROLLER_EPOCH, data, version)

        real_create_all = zk.create_all

        async def create_all(nodes: list[tuple[str, bytes]], guard: tuple[str, int] | None = None) -> bool:
            if path == "multi":
                await elect_another()
                return await real_create_all(nodes, guard)
            made = await real_create_all(nodes, guard)  # fails: partitions/1 is there
            await elect_another()
            return made

        await controller.start()
        try:
            await wait_for("controller elected", lambda: controller.active, 10)
            sent.clear()
            monkeypatch.setattr(zk, "create_all", create_all)
            topic = [(L.topic_path("late"), L.encode_assignment({0: [0], 1: [0], 2: [0]}))]
            if path == "one_by_one":  # the topic with its partitions/1 there already, at once
                topic += [(L.partitions_path("late"), b""), (L.partition_path("late", 1), b"")]
            assert await other.create_all(topic)
            await wait_for("fenced", lambda: not controller.ctx.active, 10)
        finally:
            await controller.stop()
        for p in range(3):
            assert not await zk.exists(L.partition_state_path("late", p))
        assert not [tps for tps in sent if any(t == "late" for t, _ in tps)]
        assert not [tp for tp in controller.ctx.states if tp[0] == "late"]
