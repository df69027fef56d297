"""Retention (issue 17) on real brokers with confluent-kafka producers and consumers.

Time retention with retention.ms of a few seconds and small segments while clients run; size
retention within retention.bytes + one segment; a live `minibroker configs --alter`; bad values
refused naming the key with the old value kept; the log start kept across restarts (clean and
kill -9) through log-start-offset-checkpoint; a follower that fell below its leader's log start
restarts there once and catches up.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess
from tests.support.metrics import metric
from tests.support.tools import configs, topics
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect

pytestmark = pytest.mark.clients

FAST = {"log_retention_check_interval_ms": "300"}


class Recorder:
    """A confluent-kafka producer writing numbered values; every acknowledged (offset -> value) kept."""

    def __init__(self, bootstrap: str, topic: str, size: int = 200, keyed: bool = False) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 8192,
                                  "enable.idempotence": False})
        self.topic = topic
        self.size = size
        # Each record keyed by its own number: compaction keeps every one (each is its key's latest),
        # where the log cleaner drops every record without a key, as Kafka 2.8's does.
        self.keyed = keyed
        self.acked: dict[int, bytes] = {}
        self.errors: list[str] = []
        self.sent = 0

    def _ack(self, err, msg) -> None:  # noqa: ANN001
        if err is None:
            self.acked[msg.offset()] = msg.value()
        else:
            self.errors.append(str(err))

    def send(self, n: int) -> None:
        for _ in range(n):
            value = (b"%010d" % self.sent).ljust(self.size, b".")
            key = b"%010d" % self.sent if self.keyed else None
            self.producer.produce(self.topic, value, key, partition=0, on_delivery=self._ack)
            self.sent += 1
            self.producer.poll(0)

    def run(self, stop: threading.Event, per_tick: int = 20, tick: float = 0.05) -> None:
        while not stop.is_set():
            self.send(per_tick)
            time.sleep(tick)

    def flush(self) -> None:
        assert self.producer.flush(60) == 0
        assert self.errors == []


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    """(ListOffsets earliest, latest) of partition 0, as confluent-kafka asks them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm", "enable.auto.commit": False})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
    finally:
        c.close()


def read_range(bootstrap: str, topic: str, start: int, end: int, timeout: float = 90) -> dict[int, bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "auto.offset.reset": "error"})
    got: dict[int, bytes] = {}
    try:
        c.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + timeout
        while len(got) < end - start and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                if m.offset() < end:
                    got[m.offset()] = m.value()
    finally:
        c.close()
    return got


def segment_files(log_dir: Path, topic: str) -> list[Path]:
    return sorted((log_dir / f"{topic}-0").glob("*.log"))


def check_nothing_lost(bootstrap: str, topic: str, recorder: Recorder) -> int:
    """Every acknowledged record at or above the log start reads back as written; returns the start.

    Retention may still move the start while the range is read (a pass after the size came within
    the bound: CI read from 5640 and got OFFSET_OUT_OF_RANGE); then the read starts again from the
    new start, and only a failure with the start unmoved counts."""
    for attempt in range(5):
        low, high = watermarks(bootstrap, topic)
        try:
            got = read_range(bootstrap, topic, low, high)
            break
        except AssertionError:
            if attempt == 4 or watermarks(bootstrap, topic)[0] == low:
                raise
    assert sorted(got) == list(range(low, high))
    kept = {off: v for off, v in recorder.acked.items() if off >= low}
    assert kept and all(got[off] == v for off, v in kept.items())
    return low


async def test_time_retention_while_clients_run(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(0, metrics=True, **FAST)
    topic = "timed"
    await create_topic(broker, topic, configs={"retention.ms": "3000", "segment.bytes": "16384",
                                               "file.delete.delay.ms": "1000"})
    recorder = Recorder(broker.bootstrap, topic)
    stop = threading.Event()
    tail: dict[int, bytes] = {}
    tail_errors: list[str] = []

    def follow() -> None:
        # A consumer reading along from the start, resetting to the earliest offset when it falls below it.
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tail", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "max.partition.fetch.bytes": 8192})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        try:
            while not stop.is_set():
                for m in c.consume(100, 0.2):
                    if m.error() is None:
                        tail[m.offset()] = m.value()
                    else:
                        tail_errors.append(str(m.error()))
        finally:
            c.close()

    threads = [threading.Thread(target=recorder.run, args=(stop,)), threading.Thread(target=follow)]
    for t in threads:
        t.start()
    try:
        # Old segments go while producing goes on: the log start moves past 0, then moves again.
        first = await wait_for("a first retention delete", lambda: watermarks(broker.bootstrap, topic)[0] > 0,
                               timeout=60)
        assert first
        start1 = watermarks(broker.bootstrap, topic)[0]
        await wait_for("the log start moving again",
                       lambda: watermarks(broker.bootstrap, topic)[0] > start1, timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    recorder.flush()
    low = check_nothing_lost(broker.bootstrap, topic, recorder)
    assert metric(broker, "log_start_offset", topic=topic, partition="0") >= low > 0
    # The files went too: the oldest segment on disk is the one the log starts with (retention
    # may have moved on since `low` was read).
    files = segment_files(broker.log_dir, topic)
    assert int(files[0].name[:20]) >= low
    await wait_for("the .deleted files removed after file.delete.delay.ms",
                   lambda: not list((broker.log_dir / f"{topic}-0").glob("*.deleted")), timeout=30)
    # What the tailing consumer saw is what was written.
    assert tail and all(recorder.acked[off] == v for off, v in tail.items() if off in recorder.acked)
    assert tail_errors == []

    # A consumer positioned below the start: with auto.offset.reset=error it gets the broker's
    # OFFSET_OUT_OF_RANGE; with earliest it resets to the log start and reads on.
    strict = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stale-strict",
                       "enable.auto.commit": False, "auto.offset.reset": "error"})
    strict.assign([TopicPartition(topic, 0, 5)])
    try:
        deadline = time.monotonic() + 30
        errors: list[KafkaError] = []
        while not errors and time.monotonic() < deadline:
            errors = [m.error() for m in strict.consume(10, 0.5) if m.error() is not None]
        assert errors and "out of range" in str(errors[0]).lower(), errors
    finally:
        strict.close()
    stale = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stale", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
    stale.assign([TopicPartition(topic, 0, 5)])
    try:
        deadline = time.monotonic() + 30
        seen: list[int] = []
        while not seen and time.monotonic() < deadline:
            seen = [m.offset() for m in stale.consume(10, 0.5) if m.error() is None]
        start_now = watermarks(broker.bootstrap, topic)[0]
        assert seen and seen[0] >= low and seen[0] <= start_now + 10, (seen[:3], low, start_now)
    finally:
        stale.close()


async def test_size_retention_holds_within_retention_bytes_plus_a_segment(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(0, **FAST)
    topic = "sized"
    retention_bytes, segment_bytes = 60_000, 16_384
    await create_topic(broker, topic, configs={"retention.bytes": str(retention_bytes), "retention.ms": "-1",
                                               "segment.bytes": str(segment_bytes)})
    recorder = Recorder(broker.bootstrap, topic)
    sizes: list[int] = []
    stop = threading.Event()
    producer = threading.Thread(target=recorder.run, args=(stop,))
    producer.start()

    def on_disk() -> int:
        return sum(p.stat().st_size for p in segment_files(broker.log_dir, topic) if p.exists())

    try:
        for _ in range(60):
            await asyncio.sleep(0.25)
            sizes.append(on_disk())
    finally:
        stop.set()
        producer.join(60)
    recorder.flush()
    # Far more was written than the bound: retention deleted most of it while the producer ran
    # (the sampled sizes stayed bounded, not growing with what was written). Between two passes
    # the log grows by what is produced meanwhile, so the exact bound is checked once retention
    # has had its pass after production stopped.
    assert recorder.sent * 200 > 5 * (retention_bytes + segment_bytes)
    assert max(sizes) < recorder.sent * 200 / 3
    await wait_for("the log within retention.bytes + one segment",
                   lambda: on_disk() <= retention_bytes + segment_bytes, timeout=30)
    low = check_nothing_lost(broker.bootstrap, topic, recorder)
    assert low > 0
    assert on_disk() >= retention_bytes - segment_bytes  # no more than retention asked for went


async def test_live_config_change_bad_values_describe_and_restart(
        broker_factory: Callable[..., BrokerProcess], zk_server) -> None:  # noqa: ANN001
    # A 3 s ZooKeeper session (not 6 s): the restart after kill -9 waits for the dead one to expire.
    broker = broker_factory(0, **FAST, zookeeper_session_timeout_ms="3000")
    topic = "altered"
    await create_topic(broker, topic, configs={"segment.bytes": "16384"})
    # Keyed: cleanup.policy becomes compact,delete below, and a cleaner pass (every 15 s, so only
    # on a slow run) would otherwise drop every record below the active segment, and the read from
    # the log start would then rightly begin at the active segment's base (as Kafka's would).
    recorder = Recorder(broker.bootstrap, topic, keyed=True)
    recorder.send(2000)
    recorder.flush()
    assert watermarks(broker.bootstrap, topic)[0] == 0  # 7 days by default: nothing goes
    before = len(segment_files(broker.log_dir, topic))
    assert before > 10

    zk = zk_server.connect_string
    alter = ("--entity-type", "topics", "--entity-name", topic, "--alter")
    r = configs(zk, *alter, "--add-config", "retention.bytes=50000")
    assert r.returncode == 0, r.stderr
    start = await wait_for("retention.bytes applied live",
                           lambda: watermarks(broker.bootstrap, topic)[0], timeout=30)
    assert len(segment_files(broker.log_dir, topic)) < before

    # On the wire: Fetch v5+ carries the new log start, a fetch below it is OFFSET_OUT_OF_RANGE,
    # ListOffsets earliest (-2) answers it.
    async with await connect(broker) as conn:
        for version in (5, 11):
            for offset, code in ((start, ErrorCode.NONE), (0, ErrorCode.OFFSET_OUT_OF_RANGE)):
                part = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 16,
                        "current_leader_epoch": -1}
                body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                        "topics": [{"topic": topic, "partitions": [part]}]}
                resp = await conn.request(ApiKey.FETCH, version, body)
                p = resp["responses"][0]["partitions"][0]
                assert p["error_code"] == code, (version, offset, p["error_code"])
                if code == ErrorCode.NONE:
                    assert p["log_start_offset"] == start and p["records"]
        resp = await conn.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
        assert resp["topics"][0]["partitions"][0]["offset"] == start

    # Bad values: refused naming the key, the old value kept and still applied.
    for bad in ("retention.ms=-5", "retention.ms=soon", "retention.bytes=-2", "cleanup.policy=shred",
                "segment.ms=0", "segment.bytes=10"):
        r = configs(zk, *alter, "--add-config", bad)
        assert r.returncode != 0 and bad.split("=")[0] in r.stderr, (bad, r.stdout, r.stderr)
    r = configs(zk, "--entity-type", "topics", "--entity-name", topic, "--describe")
    assert "retention.bytes=50000" in r.stdout and "retention.ms" not in r.stdout, r.stdout
    r = configs(zk, *alter, "--add-config", "cleanup.policy=[compact,delete]")  # kafka-configs' list form
    assert r.returncode == 0, r.stderr

    # `minibroker topics --describe`: the cleanup policy and the retention overrides.
    async def described() -> str | None:
        out = topics(broker.bootstrap, "--describe", "--topic", topic).stdout
        return out if "cleanup.policy=compact,delete" in out else None
    out = await wait_for("the new policy described", described, timeout=30)
    assert "retention.bytes=50000" in out and "segment.bytes=16384" in out, out

    # The log start survives a clean restart and a kill -9 (log-start-offset-checkpoint).
    low, high = watermarks(broker.bootstrap, topic)
    assert low == start > 0
    await wait_for("the checkpoint written",
                   lambda: f"{topic} 0 {low}" in (broker.log_dir / "log-start-offset-checkpoint").read_text(),
                   timeout=30)
    def served() -> tuple[int, int] | None:
        try:
            return watermarks(broker.bootstrap, topic)
        except KafkaException:  # led again only once the controller has seen the restart
            return None

    broker.stop()
    broker.start()
    assert await wait_for("the partition led again", served, timeout=60) == (low, high)
    broker.kill()
    broker.start()
    assert await wait_for("the partition led again after kill -9", served, timeout=60) == (low, high)
    assert sorted(read_range(broker.bootstrap, topic, low, high)) == list(range(low, high))


async def test_each_replica_applies_retention_and_a_follower_below_the_start_restarts_once(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    fast = {"replica_lag_time_max_ms": "3000", "replica_fetch_wait_max_ms": "200", **FAST}
    brokers = [broker_factory(i, start=False, metrics=True, **fast) for i in range(3)]
    for b in brokers:
        b.start(wait=False)
    for b in brokers:
        b.wait_ready()
    topic = "replicated"
    await create_topic(brokers[0], topic, assignment={0: [0, 1, 2]},
                       configs={"retention.bytes": "40000", "retention.ms": "-1", "segment.bytes": "16384"})
    bootstrap = ",".join(b.bootstrap for b in brokers)
    recorder = Recorder(bootstrap, topic)
    recorder.send(300)
    recorder.flush()
    follower = brokers[2]

    def end_of(b: BrokerProcess) -> float:
        try:
            return metric(b, "log_end_offset", topic=topic, partition="0")
        except (KeyError, OSError):  # not hosted (or not serving metrics) yet after a restart
            return -1

    await wait_for("the follower caught up", lambda: end_of(follower) == 300, timeout=60)
    follower.stop()
    recorder.send(3000)  # ~600 KB: the leader's retention passes everything the stopped follower holds
    recorder.flush()
    def past_the_follower() -> tuple[int, int] | None:
        w = watermarks(bootstrap, topic)
        return w if w[0] > 300 else None

    # The leader's next retention pass (every 300 ms, later on a loaded machine) moves its start.
    low, high = await wait_for("the leader's start past the stopped follower's end", past_the_follower, timeout=30)
    assert high == 3300
    assert all(int(p.name[:20]) < 300 for p in segment_files(follower.log_dir, topic))
    # The other follower applied retention to its own log too (Fetch v3 carries no log start).
    await wait_for("retention on the running follower",
                   lambda: metric(brokers[1], "log_start_offset", topic=topic, partition="0") > 300, timeout=30)

    follower.start()
    await wait_for("the restarted follower at the leader's end", lambda: end_of(follower) == high, timeout=60)
    assert metric(follower, "log_start_offset", topic=topic, partition="0") >= low
    assert int(segment_files(follower.log_dir, topic)[0].name[:20]) >= low
    # It started again once, at the leader's log start, and did not loop.
    assert follower.log().count("fetcher.restarting") == 1, follower.log()[-3000:]
    check_nothing_lost(bootstrap, topic, recorder)


async def test_bad_retention_values_through_the_admin_api_keep_the_old(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    broker = broker_factory(0)
    a = AdminClient({"bootstrap.servers": broker.bootstrap})

    def code(future) -> int:  # noqa: ANN001
        with pytest.raises(KafkaException) as e:
            future.result()
        return e.value.args[0].code()

    # CreateTopics: Kafka's INVALID_CONFIG for the topic, nothing created.
    for bad in ({"retention.ms": "-5"}, {"retention.bytes": "many"}, {"cleanup.policy": "shred"},
                {"segment.ms": "0"}):
        result = a.create_topics([NewTopic("refused", 1, 1, config=bad)], operation_timeout=20)
        assert code(result["refused"]) == KafkaError.INVALID_CONFIG, bad
    assert "refused" not in a.list_topics(timeout=10).topics

    topic = "kept"
    a.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "60000", "cleanup.policy": "delete"})],
                    operation_timeout=20)[topic].result()
    # IncrementalAlterConfigs of a bad value: INVALID_REQUEST (Kafka's ConfigException path), old kept.
    for key, value in (("retention.ms", "-2"), ("cleanup.policy", "compact,shred"), ("retention.bytes", "x")):
        ops = [ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)]
        result = a.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=ops)])
        assert code(next(iter(result.values()))) == KafkaError.INVALID_REQUEST, (key, value)
    entries = next(iter(a.describe_configs([ConfigResource("topic", topic)]).values())).result()
    assert (entries["retention.ms"].value, entries["cleanup.policy"].value) == ("60000", "delete")
    # cleanup.policy is a LIST: APPEND adds compact to it, as Kafka's incremental alter does.
    ops = [ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)]
    next(iter(a.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=ops)]).values())).result()
    entries = next(iter(a.describe_configs([ConfigResource("topic", topic)]).values())).result()
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["segment.ms"].value == "604800000" and entries["file.delete.delay.ms"].value == "60000"
