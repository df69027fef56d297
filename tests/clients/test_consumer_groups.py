"""Consumer groups with the real clients on three real brokers (issue 18): the coordinator, rebalances,
static membership and coordinator failover.

Each client consumes a 6-partition topic with two members in one group: every message exactly
once across the group, both members working, and the committed offsets (read back with
OffsetFetch from the coordinator) at the end of every partition. The two members start together
and `group.initial.rebalance.delay.ms` (Kafka's 3 s) puts both in the first generation, so there
is no rebalance mid-stream and no duplicate is legitimate.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from broker.zk.server import ZooKeeperServer
from protocol.api_keys import ApiKey
from tests.support.brokers import BrokerProcess, start_together
from tests.support.cluster import FAST, Cluster
from tests.support.groups import committed, coordinator, describe, exactly_once, produce_numbered
from tests.support.wire import connect

pytestmark = pytest.mark.clients

ROOT = Path(__file__).resolve().parents[2]

PARTITIONS = 6
OVERRIDES = {"offsets.topic.num.partitions": "10", "offsets.topic.replication.factor": "3"}


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[Cluster]:
    """Three brokers under their own chroot of the session's ZooKeeper, shared by this module's tests
    (each uses its own topic and group). Synchronous, so the tests' event loops are their own."""
    workdir = tmp_path_factory.mktemp("groups")
    zk = f"{zk_server_session.connect_string}/{workdir.name}"
    brokers = [BrokerProcess(workdir, i, zk, FAST | OVERRIDES, metrics=True) for i in range(3)]
    try:
        start_together(brokers)
        c = Cluster(brokers, None)  # type: ignore[arg-type]  # no ZooKeeper view needed here
        asyncio.run(c.wait_for("a controller that knows three brokers", lambda: _cluster_ready(c), timeout=60))
        yield c
    finally:
        for b in brokers:
            b.kill()


async def _cluster_ready(cluster: Cluster) -> bool:
    try:
        conn = await connect(cluster)
    except ConnectionError:
        return False
    try:
        resp = await conn.request(ApiKey.METADATA, 1, {"topics": []})
    finally:
        await conn.close()
    return resp["controller_id"] >= 0 and len(resp["brokers"]) == 3


async def _topic(cluster: Cluster, name: str, count: int) -> dict[int, int]:
    await cluster.create_topic(name, PARTITIONS, 3)
    return await asyncio.to_thread(produce_numbered, cluster.bootstrap, name, PARTITIONS, count)


async def _assert_committed_to_the_end(cluster: Cluster, group: str, topic: str, ends: dict[int, int]) -> None:
    async def check() -> dict[int, int] | None:
        offsets = await committed(cluster, group, topic, PARTITIONS)
        return offsets if offsets == ends else None
    await cluster.wait_for(f"{group}'s commits at the log ends {ends}", check, timeout=30, interval=0.5)


def _run_until(what: str, done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


# ---- each client, two members ---------------------------------------------------------------


def _confluent_member(bootstrap: str, topic: str, group: str, got: list[int], stop: threading.Event,
                      errors: list[str], extra: dict | None = None) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 10000, **(extra or {})})
    try:
        c.subscribe([topic])
        while not stop.is_set():
            msgs = c.consume(500, 0.5)
            for m in msgs:
                if m.error():
                    errors.append(str(m.error()))
                else:
                    got.append(int(m.value()))
            if msgs:
                c.commit(asynchronous=False)
    except Exception as e:  # noqa: BLE001 - reported by the test thread
        errors.append(repr(e))
    finally:
        c.close()


async def test_confluent_kafka_group_of_two_reads_100k_exactly_once(group_cluster: Cluster) -> None:
    topic, group, count = "grp-confluent", "g-confluent", 100_000
    ends = await _topic(group_cluster, topic, count)
    got: list[list[int]] = [[], []]
    errors: list[str] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_confluent_member, args=(group_cluster.bootstrap, topic, group, got[i], stop,
                                                                errors)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        await asyncio.to_thread(_run_until, "100,000 messages", lambda: sum(map(len, got)) >= count or bool(errors),
                                240)
    finally:
        stop.set()
        for t in threads:
            await asyncio.to_thread(t.join, 60)
    assert errors == []
    missing, duplicated = exactly_once(got[0] + got[1], count)
    assert (missing, duplicated) == ([], [])
    assert got[0] and got[1], f"one member did all the work: {len(got[0])} / {len(got[1])}"
    await _assert_committed_to_the_end(group_cluster, group, topic, ends)


async def test_kcat_balanced_consumers(group_cluster: Cluster, tmp_path: Path) -> None:
    topic, group, count = "grp-kcat", "g-kcat", 100_000
    ends = await _topic(group_cluster, topic, count)
    outs = [tmp_path / f"kcat-{i}.out" for i in range(2)]
    procs = [subprocess.Popen(["kcat", "-b", group_cluster.bootstrap, "-G", group, "-q", "-u", "-f", "%s\n",
                               "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=200", topic],
                              stdout=open(out, "wb"), stderr=subprocess.PIPE) for out in outs]

    def lines() -> list[bytes]:
        return [line for out in outs for line in out.read_bytes().split(b"\n") if line]
    try:
        await asyncio.to_thread(_run_until, "kcat's messages", lambda: len(lines()) >= count, 240)
        await asyncio.sleep(1)  # past one auto-commit interval
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)  # kcat closes the consumer: commits, leaves the group
        for p in procs:
            p.wait(30)
    per_member = [[int(v) for v in out.read_bytes().split(b"\n") if v] for out in outs]
    assert exactly_once(per_member[0] + per_member[1], count) == ([], [])
    assert per_member[0] and per_member[1]
    await _assert_committed_to_the_end(group_cluster, group, topic, ends)


async def test_kafka_python_group_of_two(group_cluster: Cluster) -> None:
    from kafka import KafkaConsumer

    topic, group, count = "grp-kafka-python", "g-kafka-python", 100_000
    ends = await _topic(group_cluster, topic, count)
    got: list[list[int]] = [[], []]
    errors: list[str] = []
    stop = threading.Event()

    def member(i: int) -> None:
        c = KafkaConsumer(topic, bootstrap_servers=group_cluster.bootstrap, group_id=group,
                          auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10000,
                          heartbeat_interval_ms=1000)
        try:
            while not stop.is_set():
                batch = c.poll(timeout_ms=500, max_records=500)
                for records in batch.values():
                    got[i].extend(int(r.value) for r in records)
                if batch:
                    c.commit()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        finally:
            c.close(autocommit=False)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        await asyncio.to_thread(_run_until, "kafka-python's messages",
                                lambda: sum(map(len, got)) >= count or bool(errors), 300)
    finally:
        stop.set()
        for t in threads:
            await asyncio.to_thread(t.join, 60)
    assert errors == []
    assert exactly_once(got[0] + got[1], count) == ([], [])
    assert got[0] and got[1]
    await _assert_committed_to_the_end(group_cluster, group, topic, ends)


async def test_aiokafka_group_of_two(group_cluster: Cluster) -> None:
    from aiokafka import AIOKafkaConsumer

    topic, group, count = "grp-aiokafka", "g-aiokafka", 100_000
    ends = await _topic(group_cluster, topic, count)
    got: list[list[int]] = [[], []]
    consumers = [AIOKafkaConsumer(topic, bootstrap_servers=group_cluster.bootstrap, group_id=group,
                                  auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10000,
                                  heartbeat_interval_ms=1000) for _ in range(2)]

    async def member(i: int) -> None:
        c = consumers[i]
        while sum(map(len, got)) < count:
            batch = await c.getmany(timeout_ms=500, max_records=500)
            for records in batch.values():
                got[i].extend(int(r.value) for r in records)
            if batch:
                await c.commit()

    await asyncio.gather(*(c.start() for c in consumers))
    try:
        await asyncio.wait_for(asyncio.gather(member(0), member(1)), 300)
    finally:
        await asyncio.gather(*(c.stop() for c in consumers))
    assert exactly_once(got[0] + got[1], count) == ([], [])
    assert got[0] and got[1]
    await _assert_committed_to_the_end(group_cluster, group, topic, ends)


async def test_kafkajs_consumer_group_of_two(group_cluster: Cluster, kafkajs_dir: Path, tmp_path: Path) -> None:
    topic, group, count = "grp-kafkajs", "g-kafkajs", 100_000
    ends = await _topic(group_cluster, topic, count)
    outs = [tmp_path / f"kafkajs-{i}.out" for i in range(2)]
    procs = [subprocess.Popen(["node", "group_consume.js", group_cluster.bootstrap, topic, group], cwd=kafkajs_dir,
                              stdout=open(out, "wb"), stderr=subprocess.PIPE) for out in outs]

    def values(out: Path) -> list[int]:
        return [int(line.split(b" ")[2]) for line in out.read_bytes().split(b"\n") if line.count(b" ") == 2]
    try:
        await asyncio.to_thread(_run_until, "KafkaJS's messages",
                                lambda: sum(len(values(o)) for o in outs) >= count, 300)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)  # disconnect: leaves the group
        for p in procs:
            p.wait(30)
    per_member = [values(o) for o in outs]
    assert exactly_once(per_member[0] + per_member[1], count) == ([], [])
    assert per_member[0] and per_member[1]
    await _assert_committed_to_the_end(group_cluster, group, topic, ends)


# ---- rebalance on leave ---------------------------------------------------------------------


async def test_a_member_leaving_hands_its_partitions_over_from_committed_offsets(group_cluster: Cluster) -> None:
    topic, group, count = "grp-leave", "g-leave", 6_000
    await _topic(group_cluster, topic, count)
    got: list[list[int]] = [[], []]
    errors: list[str] = []
    stops = [threading.Event(), threading.Event()]
    threads = [threading.Thread(target=_confluent_member, args=(group_cluster.bootstrap, topic, group, got[i],
                                                                stops[i], errors)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        await asyncio.to_thread(_run_until, "the first 6,000", lambda: sum(map(len, got)) >= count, 120)
        assert got[0] and got[1]
        stops[1].set()  # member 1 closes: commits, LeaveGroup; member 0 takes all six partitions
        await asyncio.to_thread(threads[1].join, 60)
        ends = await asyncio.to_thread(produce_numbered, group_cluster.bootstrap, topic, PARTITIONS, count, count)
        await asyncio.to_thread(_run_until, "the second 6,000 on the remaining member",
                                lambda: len(got[0]) + len(got[1]) >= 2 * count, 120)
    finally:
        for s in stops:
            s.set()
        for t in threads:
            await asyncio.to_thread(t.join, 60)
    assert errors == []
    missing, duplicated = exactly_once(got[0] + got[1], 2 * count)
    assert missing == []
    # Member 1 committed everything it read before leaving: nothing is read twice.
    assert duplicated == []
    assert any(v >= count and v % PARTITIONS in _partitions_of_member(got[1], count) for v in got[0])
    total = {p: 2 * n for p, n in ends.items()}
    await _assert_committed_to_the_end(group_cluster, group, topic, total)


def _partitions_of_member(values: list[int], below: int) -> set[int]:
    return {v % PARTITIONS for v in values if v < below}


# ---- static membership ------------------------------------------------------------------------


async def test_a_static_member_restarting_within_its_session_gets_its_partitions_back_without_a_rebalance(
        group_cluster: Cluster) -> None:
    topic, group = "grp-static", "g-static"
    await group_cluster.create_topic(topic, PARTITIONS, 3)
    assignments: dict[str, list[set[int]]] = {"a": [], "b": []}

    def consumer(name: str) -> Consumer:
        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            assignments[name].append({p.partition for p in parts})
        c = Consumer({"bootstrap.servers": group_cluster.bootstrap, "group.id": group, "group.instance.id": name,
                      "session.timeout.ms": 30000, "auto.offset.reset": "earliest"})
        c.subscribe([topic], on_assign=on_assign)
        return c

    def poll_until(consumers: list[Consumer], what: str, done: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {assignments}"
            for c in consumers:
                m = c.poll(0.1)
                if m is not None and m.error() and m.error().fatal():
                    raise KafkaException(m.error())

    a, b = consumer("a"), consumer("b")
    try:
        await asyncio.to_thread(poll_until, [a, b], "both assigned", lambda: bool(assignments["a"] and assignments["b"]))
        before = await describe(group_cluster, group)
        assert before["group_state"] == "Stable" and len(before["members"]) == 2
        old_b = assignments["b"][-1]
        old_member = next(m["member_id"] for m in before["members"] if m["group_instance_id"] == "b")
        b.close()  # a static member leaves no LeaveGroup: its partitions wait for its session to end
        b = consumer("b")
        await asyncio.to_thread(poll_until, [a, b], "b assigned again", lambda: len(assignments["b"]) == 2)
        assert assignments["b"][-1] == old_b
        for _ in range(20):  # a keeps polling for a while: any rebalance would reach its callback
            await asyncio.to_thread(a.poll, 0.1)
        assert len(assignments["a"]) == 1, f"a was reassigned: {assignments['a']}"  # no rebalance
        after = await describe(group_cluster, group)
        assert after["group_state"] == "Stable"
        new_member = next(m["member_id"] for m in after["members"] if m["group_instance_id"] == "b")
        assert new_member != old_member  # the rejoin replaced the member id, as Kafka does
    finally:
        a.close()
        b.close()


# ---- three members joining one by one, one killed ------------------------------------------------


def _member_log(path: Path) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """A group_member's reads (partition, offset, value) and confirmed commits (partition, next offset), in order;
    a line cut short by a kill is ignored."""
    reads, commits = [], []
    for line in path.read_text().split("\n"):
        parts = line.split(" ")
        if parts[0] == "R" and len(parts) == 4:
            reads.append((int(parts[1]), int(parts[2]), int(parts[3])))
        elif parts[0] == "C" and len(parts) == 3:
            commits.append((int(parts[1]), int(parts[2])))
    return reads, commits


def _uncommitted(path: Path) -> set[tuple[int, int]]:
    """The (partition, offset) reads of one member that no later commit of its own covers."""
    covered: dict[int, int] = {}
    pending: list[tuple[int, int]] = []
    for line in path.read_text().split("\n"):
        parts = line.split(" ")
        if parts[0] == "R" and len(parts) == 4:
            pending.append((int(parts[1]), int(parts[2])))
        elif parts[0] == "C" and len(parts) == 3:
            covered[int(parts[1])] = max(covered.get(int(parts[1]), 0), int(parts[2]))
    return {(p, o) for p, o in pending if o >= covered.get(p, 0)}


async def test_three_members_join_one_by_one_and_a_killed_one_loses_only_its_uncommitted_tail(
        group_cluster: Cluster, tmp_path: Path) -> None:
    topic, group, count = "grp-kill", "g-kill", 12_000
    ends = await _topic(group_cluster, topic, count)
    logs = [tmp_path / f"member-{i}.out" for i in range(3)]
    procs: list[subprocess.Popen[bytes]] = []

    def start(i: int) -> None:
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.support.group_member", group_cluster.bootstrap,
                                       topic, group, "0.05"], cwd=ROOT, stdout=open(logs[i], "wb"),
                                      stderr=subprocess.DEVNULL))

    def reads(i: int) -> int:
        return len(_member_log(logs[i])[0]) if logs[i].exists() else 0
    try:
        for i in range(3):  # each joins once the one before is consuming: a rebalance per join
            start(i)
            await asyncio.to_thread(_run_until, f"member {i} consuming", lambda i=i: reads(i) > 0, 60)
        killed = procs[1]
        killed.kill()  # SIGKILL: no commit, no LeaveGroup; the coordinator notices after session.timeout.ms
        killed.wait(10)
        assert reads(0) + reads(1) + reads(2) < count, "the stream ended before the kill"

        def everything_read() -> bool:
            return len({v for log in logs for _, _, v in _member_log(log)[0]}) >= count
        await asyncio.to_thread(_run_until, "every message read by the survivors", everything_read, 180)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)
    all_reads = [r for log in logs for r in _member_log(log)[0]]
    missing, duplicated = exactly_once([v for _, _, v in all_reads], count)
    assert missing == []
    # Every value read twice was first read without a commit covering it (the killed member's
    # tail, or a batch whose commit a rebalance refused); never one a confirmed commit had passed.
    uncommitted = set().union(*(_uncommitted(log) for log in logs))
    position = {v: (p, o) for p, o, v in all_reads}
    assert all(position[v] in uncommitted for v in duplicated), [position[v] for v in duplicated
                                                                   if position[v] not in uncommitted]
    assert len(duplicated) <= len(uncommitted)
    killed_tail = _uncommitted(logs[1])
    print(f"kill -9: {len(duplicated)} duplicates, killed member's uncommitted tail {len(killed_tail)}")
    survivors = {p for p, _, _ in _member_log(logs[0])[0] + _member_log(logs[2])[0]}
    assert survivors == set(range(PARTITIONS))  # the killed member's partitions moved to the others
    await _assert_committed_to_the_end(group_cluster, group, topic, ends)


# ---- coordinator failover -----------------------------------------------------------------------


async def test_killing_the_coordinator_moves_the_group_with_its_committed_offsets(group_cluster: Cluster) -> None:
    topic, group, count = "grp-failover", "g-failover", 30_000
    ends = await _topic(group_cluster, topic, count)
    got: list[list[tuple[int, int, int]]] = [[], []]  # (partition, offset, value)
    acknowledged: dict[int, int] = {}  # the last commit the coordinator confirmed, per partition
    kill_at: list[dict[int, int]] = []
    errors: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def member(i: int) -> None:
        c = Consumer({"bootstrap.servers": group_cluster.bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 10000})
        try:
            c.subscribe([topic])
            while not stop.is_set():
                msgs = c.consume(200, 0.5)
                for m in msgs:
                    if not m.error():
                        got[i].append((m.partition(), m.offset(), int(m.value())))
                if msgs:
                    time.sleep(0.05)  # slow enough that the kill lands mid-stream
                    try:
                        done = c.commit(asynchronous=False) or []
                    except KafkaException as e:  # the coordinator is gone: the next commit goes to the new one
                        if e.args[0].fatal():
                            errors.append(str(e))
                        continue
                    with lock:  # what the coordinator confirmed
                        for p in done:
                            if p.error is None and p.offset >= 0:
                                acknowledged[p.partition] = max(acknowledged.get(p.partition, 0), p.offset)
        finally:
            c.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        await asyncio.to_thread(_run_until, "a third of the stream", lambda: sum(map(len, got)) >= count // 3, 120)
        node, _, _ = await coordinator(group_cluster, group)
        with lock:
            kill_at.append(dict(acknowledged))
        group_cluster.by_id(node).kill()  # SIGKILL: no controlled shutdown, no goodbye
        (new_node,) = await group_cluster.wait_for(
            "a new coordinator", lambda: _other_coordinator(group_cluster, group, node), timeout=60, interval=0.5)
        assert new_node != node
        await asyncio.to_thread(_run_until, "the rest of the stream",
                                lambda: len({v for g in got for _, _, v in g}) >= count or bool(errors), 240)
    finally:
        stop.set()
        for t in threads:
            await asyncio.to_thread(t.join, 60)
    assert errors == []
    everything = [v for g in got for _, _, v in g]
    missing, duplicated = exactly_once(everything, count)
    assert missing == []
    # Duplicates only from the uncommitted tail: a value read twice lies at or after the last
    # offset the old coordinator had confirmed for its partition before the kill.
    confirmed = kill_at[0]
    assert confirmed, "no commit confirmed before the kill: the bound below would allow anything"
    offsets_of = {v: (p, o) for g in got for p, o, v in g}
    for v in duplicated:
        partition, offset = offsets_of[v]
        assert offset >= confirmed.get(partition, 0), (v, partition, offset, confirmed)
    await _assert_committed_to_the_end(group_cluster, group, topic, ends)


async def _other_coordinator(cluster: Cluster, group: str, dead: int) -> tuple[int] | None:
    """(node id,) of the group's coordinator once it is another broker (a tuple: node 0 is falsy)."""
    try:
        node, _, _ = await coordinator(cluster, group)
    except (AssertionError, ConnectionError, OSError):
        return None
    return (node,) if node != dead else None
