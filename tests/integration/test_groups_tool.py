"""`minibroker groups` and the group metrics against three real brokers, a real ZooKeeper and a real
confluent-kafka consumer group.

One topic of three partitions, a replica on every broker (so the coordinator, whichever broker it
is, knows every partition's end), filled in two phases a few seconds apart (for --to-datetime).
A confluent-kafka consumer subscribes with a group and commits chosen offsets; the tool's
describe output, the coordinator's metrics and confluent-kafka's own `committed()` must then
agree to the offset. Resets in every mode, dry-run and execute, are checked the same way, and
refused while the consumer is a member; then offsets and the group are deleted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.tools.group_admin import GroupAdmin
from broker.zk.server import ZooKeeperServer
from tests.support.cluster import Cluster
from tests.support.metrics import samples, scrape
from tests.support.tools import groups, table_rows
from tests.support.traffic import produce_messages

pytestmark = pytest.mark.integration

TOPIC = "orders"
HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
          "CLIENT-ID"]
PHASE1 = {0: 60, 1: 30, 2: 40}  # messages per partition before the mark
PHASE2 = {0: 40, 1: 30, 2: 0}  # and after it
ENDS = {p: PHASE1[p] + PHASE2[p] for p in PHASE1}  # 100, 60, 40
COMMITTED = {0: 70, 1: 60, 2: 10}
GROUP_CONFIG = {"offsets.topic.num.partitions": "6", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
async def group_cluster(tmp_path: Path, zk_server: ZooKeeperServer) -> AsyncIterator[Cluster]:
    c = await Cluster.start(tmp_path, zk_server.connect_string, overrides=GROUP_CONFIG)
    try:
        yield c
    finally:
        await c.close()


def produce_phases(bootstrap: str) -> int:
    """Both phases; returns the mark (ms) between them: every phase-1 record is before it."""
    produce_messages(bootstrap, TOPIC, [(None, f"a{p}-{i}".encode(), p) for p, n in PHASE1.items() for i in range(n)])
    # Every phase-1 record was stamped (librdkafka: the wall clock at produce()) before its
    # acknowledgement returned above; 100 ms either side of the mark is ample at ms resolution.
    time.sleep(0.1)
    mark = int(time.time() * 1000)
    time.sleep(0.1)
    produce_messages(bootstrap, TOPIC, [(None, f"b{p}-{i}".encode(), p) for p, n in PHASE2.items() for i in range(n)])
    return mark


def consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000})


def consume_all(c: Consumer, total: int, timeout: float = 90) -> None:
    got = 0
    deadline = time.monotonic() + timeout
    while got < total:
        assert time.monotonic() < deadline, f"consumed {got} of {total}"
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1


def committed_by_confluent(bootstrap: str, group: str) -> dict[int, int]:
    """The group's offsets as confluent-kafka reads them (OffsetFetch, without joining)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(TOPIC, p) for p in ENDS], timeout=30)}
    finally:
        c.close()


def describe(bootstrap: str, group: str) -> tuple[list[list[str]], str]:
    r = groups(bootstrap, "--describe", "--group", group)
    assert r.returncode == 0, r.stderr
    rows = table_rows(r.stdout)
    assert rows[0] == HEADER
    return rows[1:], r.stderr


def offsets_in(rows: list[list[str]]) -> dict[int, int]:
    return {int(r[2]): int(r[3]) for r in rows if r[1] == TOPIC and r[3] != "-"}


def reset(bootstrap: str, group: str, *args: str, topic: str = TOPIC) -> tuple[dict[int, int], str]:
    r = groups(bootstrap, "--reset-offsets", "--group", group, "--topic", topic, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = table_rows(r.stdout)
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert all(row[0] == group and row[1] == topic.partition(":")[0] for row in rows[1:])
    return {int(row[2]): int(row[3]) for row in rows[1:]}, r.stderr


async def coordinator_metrics(cluster: Cluster, group: str) -> str:
    async with GroupAdmin(cluster.bootstrap, 30) as admin:
        node = (await admin.coordinator(group)).node_id
    return scrape(cluster.by_id(node))


def group_series(text: str, name: str, group: str) -> dict[str, float]:
    return {labels.get("partition", ""): v for labels, v in samples(text, name) if labels["group"] == group}


async def test_describe_metrics_reset_and_delete_against_a_live_group(group_cluster: Cluster) -> None:
    cluster = group_cluster
    await cluster.create_topic(TOPIC, 3, 3)
    bootstrap = cluster.bootstrap
    mark = await asyncio.to_thread(produce_phases, bootstrap)

    c = consumer(bootstrap, "g1", "cons-a")
    c.subscribe([TOPIC])
    await asyncio.to_thread(consume_all, c, sum(ENDS.values()))
    c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()], asynchronous=False)
    member_id = c.memberid()

    # --list and --describe while the consumer is a member.
    listed = groups(bootstrap, "--list")
    assert listed.returncode == 0 and "g1" in listed.stdout.split(), listed.stdout + listed.stderr
    rows, _ = describe(bootstrap, "g1")
    assert sorted(rows) == sorted(
        ["g1", TOPIC, str(p), str(COMMITTED[p]), str(ENDS[p]), str(ENDS[p] - COMMITTED[p]), member_id, "/127.0.0.1",
         "cons-a"] for p in ENDS)

    # The coordinator's metrics say the same.
    async def lag_matches() -> bool:
        text = await coordinator_metrics(cluster, "g1")
        return group_series(text, "consumer_group_lag", "g1") == {str(p): ENDS[p] - COMMITTED[p] for p in ENDS}
    await cluster.wait_for("consumer_group_lag = log end - committed", lag_matches)
    text = await coordinator_metrics(cluster, "g1")
    assert group_series(text, "consumer_group_members", "g1") == {"": 1.0}
    assert group_series(text, "consumer_group_state", "g1") == {"": 3.0}  # Stable
    assert group_series(text, "group_rebalances_total", "g1") == {"": 1.0}  # one generation so far

    # Resets and deletes are refused while the group has a member; nothing moves.
    refused = groups(bootstrap, "--reset-offsets", "--group", "g1", "--topic", TOPIC, "--to-earliest", "--execute")
    assert refused.returncode == 1
    assert ("Assignments can only be reset if the group 'g1' is inactive, but the current state is Stable."
            in refused.stderr)
    assert "NEW-OFFSET" not in refused.stdout
    not_empty = groups(bootstrap, "--delete", "--group", "g1")
    assert not_empty.returncode == 1 and "NON_EMPTY_GROUP" in not_empty.stdout + not_empty.stderr
    assert committed_by_confluent(bootstrap, "g1") == COMMITTED

    # The member leaves: the group is Empty and its offsets stay.
    c.close()
    rows, err = describe(bootstrap, "g1")
    assert "Consumer group 'g1' has no active members." in err
    assert sorted(rows) == sorted(["g1", TOPIC, str(p), str(COMMITTED[p]), str(ENDS[p]), str(ENDS[p] - COMMITTED[p]),
                                   "-", "-", "-"] for p in ENDS)

    # Every mode, first as a dry run (nothing committed), then executed.
    cases = [
        (("--to-earliest",), {0: 0, 1: 0, 2: 0}),
        (("--to-latest",), ENDS),
        (("--to-offset", "50"), {0: 50, 1: 50, 2: 40}),  # clamped to the log end of 1 and 2
        (("--shift-by", "-20"), {0: 30, 1: 30, 2: 20}),
        (("--to-datetime", _iso(mark)), {0: PHASE1[0], 1: PHASE1[1], 2: ENDS[2]}),  # 2: nothing after: log end
        (("--shift-by", "-1000"), {0: 0, 1: 0, 2: 0}),  # clamped to the log start
    ]
    current = dict(COMMITTED)
    for mode, expected in cases:
        planned, _ = reset(bootstrap, "g1", "--dry-run", *mode)
        assert planned == expected, mode
        assert committed_by_confluent(bootstrap, "g1") == current, mode
        executed, err = reset(bootstrap, "g1", "--execute", *mode)
        assert executed == expected, mode
        if mode == ("--to-offset", "50"):
            assert "New offset (50) is higher than latest offset for topic partition orders-2. Value will be set to 40" \
                in err
        current = dict(expected)
        assert committed_by_confluent(bootstrap, "g1") == current, mode
        assert offsets_in(describe(bootstrap, "g1")[0]) == current, mode

    # One partition by T:P; the others keep theirs.
    executed, _ = reset(bootstrap, "g1", "--execute", "--to-offset", "7", topic=f"{TOPIC}:1")
    assert executed == {1: 7}
    assert committed_by_confluent(bootstrap, "g1") == {0: 0, 1: 7, 2: 0}

    # The metrics follow the executed resets.
    async def lag_after_reset() -> bool:
        text = await coordinator_metrics(cluster, "g1")
        return group_series(text, "consumer_group_lag", "g1") == {"0": 100.0, "1": 53.0, "2": 40.0}
    await cluster.wait_for("consumer_group_lag after the resets", lag_after_reset)
    text = await coordinator_metrics(cluster, "g1")
    assert group_series(text, "consumer_group_members", "g1") == {"": 0.0}
    assert group_series(text, "consumer_group_state", "g1") == {"": 0.0}  # Empty

    # --delete-offsets of one partition; the others stay.
    r = groups(bootstrap, "--delete-offsets", "--group", "g1", "--topic", f"{TOPIC}:1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Request succeed for deleting offsets with topic {TOPIC} group g1" in r.stdout
    assert table_rows(r.stdout)[-2:] == [["TOPIC", "PARTITION", "STATUS"], [TOPIC, "1", "Successful"]]
    assert offsets_in(describe(bootstrap, "g1")[0]) == {0: 0, 2: 0}
    assert committed_by_confluent(bootstrap, "g1") == {0: 0, 1: -1001, 2: 0}  # -1001: none (OFFSET_INVALID)

    # --delete: gone from --list, and describing it is an error.
    r = groups(bootstrap, "--delete", "--group", "g1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Deletion of requested consumer groups ('g1') was successful." in r.stdout
    assert "g1" not in groups(bootstrap, "--list").stdout.split()
    gone = groups(bootstrap, "--describe", "--group", "g1")
    assert gone.returncode == 1 and "Error: Consumer group 'g1' does not exist." in gone.stderr
    assert committed_by_confluent(bootstrap, "g1") == {0: -1001, 1: -1001, 2: -1001}


def _iso(ms: int) -> str:
    """Kafka's --to-datetime form in UTC, e.g. 2026-11-24T05:30:00.123."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}"


async def test_reset_of_a_group_that_does_not_exist_creates_its_offsets(group_cluster: Cluster) -> None:
    # Kafka's tool allows a reset of a Dead (unknown) group: it is how offsets are set up before
    # a new application first consumes.
    cluster = group_cluster
    await cluster.create_topic(TOPIC, 3, 3)
    await asyncio.to_thread(produce_phases, cluster.bootstrap)
    executed, _ = reset(cluster.bootstrap, "fresh", "--execute", "--to-offset", "25")
    assert executed == {0: 25, 1: 25, 2: 25}
    assert committed_by_confluent(cluster.bootstrap, "fresh") == {0: 25, 1: 25, 2: 25}
    c = consumer(cluster.bootstrap, "fresh", "cons-b")
    c.subscribe([TOPIC])
    try:
        # The consumer starts at the reset offsets: it gets exactly what lies above them.
        await asyncio.to_thread(consume_all, c, sum(ENDS[p] - 25 for p in ENDS))
        assert c.poll(2) is None
        # Offsets of a topic the group subscribes to are not deleted (Kafka's GROUP_SUBSCRIBED_TO_TOPIC).
        r = groups(cluster.bootstrap, "--delete-offsets", "--group", "fresh", "--topic", TOPIC)
        assert r.returncode == 1
        assert "Encounter some partition level error, see the follow-up details:" in r.stderr
        assert table_rows(r.stdout)[-3:] == [[TOPIC, str(p), "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"] for p in range(3)]
    finally:
        c.close()
    assert committed_by_confluent(cluster.bootstrap, "fresh") == {0: 25, 1: 25, 2: 25}

    # Once the member has left, they are; a group left without members or offsets is removed (Dead).
    r = groups(cluster.bootstrap, "--delete-offsets", "--group", "fresh", "--topic", TOPIC)
    assert r.returncode == 0, r.stdout + r.stderr
    assert table_rows(r.stdout)[-3:] == [[TOPIC, str(p), "Successful"] for p in range(3)]
    assert committed_by_confluent(cluster.bootstrap, "fresh") == {0: -1001, 1: -1001, 2: -1001}
    gone = groups(cluster.bootstrap, "--describe", "--group", "fresh")
    assert gone.returncode == 1 and "Error: Consumer group 'fresh' does not exist." in gone.stderr


async def test_lag_series_only_for_partitions_with_a_replica_on_the_coordinator(group_cluster: Cluster) -> None:
    # One replica per partition, spread over the three brokers: the coordinator knows the end of
    # the partitions it holds and reports lag for those only (see broker/group_metrics.py).
    cluster = group_cluster
    await cluster.create_topic("solo", 3, 1)
    produce_messages(cluster.bootstrap, "solo", [(None, b"x", p) for p in range(3) for _ in range(10 + p)])
    executed, _ = reset(cluster.bootstrap, "solo-g", "--execute", "--to-offset", "4", topic="solo")
    assert executed == {0: 4, 1: 4, 2: 4}
    async with GroupAdmin(cluster.bootstrap, 30) as admin:
        coordinator = (await admin.coordinator("solo-g")).node_id
        md = await admin.metadata(["solo"])
    replicas = {p["partition_index"]: p["replica_nodes"] for t in md["topics"] if t["name"] == "solo"
                for p in t["partitions"]}
    held = {str(p): float(10 + p - 4) for p, nodes in replicas.items() if coordinator in nodes}
    assert 0 < len(held) < 3, replicas  # the controller spreads single replicas over the brokers

    async def lag_of_held() -> bool:
        return group_series(scrape(cluster.by_id(coordinator)), "consumer_group_lag", "solo-g") == held
    await cluster.wait_for("lag series of the partitions held by the coordinator", lag_of_held)
    # The tool asks each leader, so it shows all three.
    rows, _ = describe(cluster.bootstrap, "solo-g")
    assert sorted((r[2], r[3], r[4], r[5]) for r in rows) == [(str(p), "4", str(10 + p), str(6 + p)) for p in range(3)]


async def test_describe_decodes_kafka_pythons_assignment_and_commits(group_cluster: Cluster) -> None:
    # kafka-python writes the consumer protocol's bytes with its own (Python) code, not librdkafka's.
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpPartition
    from kafka.structs import OffsetAndMetadata

    cluster = group_cluster
    await cluster.create_topic(TOPIC, 3, 3)
    produce_messages(cluster.bootstrap, TOPIC, [(None, b"x", p) for p, n in ENDS.items() for _ in range(n)])

    def join_and_commit() -> KafkaConsumer:
        kc = KafkaConsumer(TOPIC, bootstrap_servers=cluster.bootstrap, group_id="kp", client_id="kp-client",
                           enable_auto_commit=False, auto_offset_reset="earliest")
        deadline = time.monotonic() + 60
        while len(kc.assignment()) < 3:
            assert time.monotonic() < deadline, kc.assignment()
            kc.poll(timeout_ms=500)
        kc.commit({KpPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in COMMITTED.items()})
        return kc

    kc = await asyncio.to_thread(join_and_commit)
    try:
        rows, _ = describe(cluster.bootstrap, "kp")
        assert len({r[6] for r in rows}) == 1 and rows[0][6].startswith("kp-client-")
        assert sorted(r[:6] + r[7:] for r in rows) == sorted(
            ["kp", TOPIC, str(p), str(COMMITTED[p]), str(ENDS[p]), str(ENDS[p] - COMMITTED[p]), "/127.0.0.1",
             "kp-client"] for p in ENDS)
    finally:
        await asyncio.to_thread(kc.close)
