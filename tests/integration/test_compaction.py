"""Log compaction on real brokers (issue 17, items 2 and 3).

- Compaction on RF=3: 200,000 records over 1,000 keys with updates and tombstones (confluent-kafka,
  acks=all); a consumer reading from the start while the cleaners run ends with, per key, exactly
  the latest value produced; every replica's segment files then hold each key once, with its
  latest value at the offset it was produced at; once delete.retention.ms is lowered (live,
  through `minibroker configs`), the tombstones go as well.
- kill -9 during cleaning, at four points (MINIBROKER_TEST_CLEANER_KILL_AT: a `.cleaned` file half
  written, whole, renamed to `.swap`, the old segments renamed to `.deleted`): each restart opens
  a readable log with every key's latest value, and the next pass completes.
- The cleaner throttle: log.cleaner.io.max.bytes.per.second holds the cleaner's read + written
  bytes within ±10% over a 30 s window, by its counters and by the broker process's read and
  write syscalls (/proc/<pid>/io rchar + wchar; the page cache hides the block device's reads);
  lowered through the brokers' default entity, the new bound holds within ±10% over 10 s.
- An idempotent producer's last batch, its records superseded, stays as an empty batch header
  (Kafka's rule, so its last sequence survives), and the producer goes on.
- A compacted topic refuses a record without a key: INVALID_RECORD for that partition, nothing
  appended, the other partition of the same request appended.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from broker.log.cleaner.cleaner import KILL_AT_ENV
from protocol.errors import ErrorCode
from protocol.layouts import RECORD_BATCH_HEADER, RECORD_BATCH_HEADER_SIZE
from protocol.records.records import decode_records
from tests.support.brokers import BrokerProcess
from tests.support.cluster import FAST
from tests.support.metrics import metric
from tests.support.replication import partition_bytes
from tests.support.tools import configs
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration

OPTS = {k.replace(".", "_"): v for k, v in FAST.items()} | {"log_cleaner_backoff_ms": "300"}
KEYS = 1000
SEGMENT = 100_000

Produced = dict[int, tuple[bytes, bytes | None]]


def produce_records(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> Produced:
    """Produce with confluent-kafka (acks=all); returns offset -> (key, value) of each record."""
    out: Produced = {}
    errors: list[str] = []

    def delivered(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(str(err))
        else:
            out[msg.offset()] = (msg.key(), msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.num.messages": 500, "batch.size": 16384,
                  "enable.idempotence": False, "message.timeout.ms": 120_000})
    for key, value in records:
        while True:
            try:
                p.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:3]
    assert len(out) == len(records)
    return out


def workload(n: int, seed: int) -> list[tuple[bytes, bytes | None]]:
    """n updates over KEYS keys; one in twenty is a tombstone."""
    rng = random.Random(seed)
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(n):
        key = b"key-%04d" % rng.randrange(KEYS)
        out.append((key, None if rng.random() < 0.05 else b"value-%d-%d" % (seed, i)))
    return out


def filler(n: int, tag: str) -> list[tuple[bytes, bytes | None]]:
    """Records of keys of their own, to push the workload out of the active segment."""
    return [(b"filler-%s-%06d" % (tag.encode(), i), b"x" * 200) for i in range(n)]


def latest_of(produced: Produced, prefix: bytes = b"key-") -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for offset in sorted(produced):
        key, value = produced[offset]
        if key.startswith(prefix):
            out[key] = (offset, value)
    return out


def consume_all(bootstrap: str, topic: str, end: int, timeout: float = 120) -> dict[bytes, bytes | None]:
    """A consumer from the start to `end`: the last value it saw per key (None: a tombstone)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "max.partition.fetch.bytes": 65536})
    seen: dict[bytes, bytes | None] = {}
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        position = 0
        while position < end:
            assert time.monotonic() < deadline, f"consumer stuck at {position} of {end}"
            for m in c.consume(500, 1.0):
                if m.error() is not None:
                    continue
                seen[m.key()] = m.value()
                position = m.offset() + 1
    finally:
        c.close()
    return seen


def on_disk(broker: BrokerProcess, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in decode_records(partition_bytes(broker, topic, 0))]


def compacted_exactly(broker: BrokerProcess, topic: str, produced: Produced, tombstones_gone: bool) -> bool:
    """Every workload key once on disk, its latest record at its produced offset (tombstones too,
    unless `tombstones_gone`); every record on disk is the one produced at its offset."""
    records = on_disk(broker, topic)
    for offset, key, value in records:
        assert produced.get(offset) == (key, value), f"broker {broker.broker_id}: offset {offset} changed"
    mine = [(o, k, v) for o, k, v in records if k is not None and k.startswith(b"key-")]
    expected = {k: ov for k, ov in latest_of(produced).items() if not (tombstones_gone and ov[1] is None)}
    got: dict[bytes, tuple[int, bytes | None]] = {}
    for o, k, v in mine:
        if k in got:
            return False  # a duplicate: not cleaned yet
        assert k is not None
        got[k] = (o, v)
    return got == expected


async def wait_compacted(brokers: list[BrokerProcess], topic: str, produced: Produced, tombstones_gone: bool,
                         timeout: float = 180) -> None:
    for b in brokers:
        await wait_for(f"broker {b.broker_id} compacted (tombstones gone: {tombstones_gone})",
                       lambda b=b: compacted_exactly(b, topic, produced, tombstones_gone), timeout=timeout,
                       interval=1.0)


def _topic_notifications(broker, topic: str) -> int:  # noqa: ANN001
    """Config change notifications for `topic` the broker has applied (its log's events)."""
    return sum(1 for line in broker.log().splitlines()
               if "config.notification_applied" in line and "entity_type='topics'" in line
               and f"entity='{topic}'" in line.split())


async def test_compaction_on_three_replicas(broker_factory, zk_server) -> None:  # noqa: ANN001
    brokers = [broker_factory(i, start=False, metrics=True, **OPTS) for i in range(3)]
    for b in brokers:
        b.start(wait=False)
    for b in brokers:
        b.wait_ready()
    bootstrap = ",".join(b.bootstrap for b in brokers)
    await create_topic(brokers[0], "table", 1, 3, configs={
        "cleanup.policy": "compact", "segment.bytes": str(SEGMENT), "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "3600000", "min.insync.replicas": "2"})
    records = workload(200_000, 1)
    produced = await asyncio.to_thread(produce_records, bootstrap, "table", records)
    # Enough records of other keys that the whole workload lies below every replica's active segment.
    produced |= await asyncio.to_thread(produce_records, bootstrap, "table", filler(3 * SEGMENT // 200, "a"))
    end = max(produced) + 1
    latest = latest_of(produced)
    # A consumer from the start while the cleaners run: per key exactly the latest value.
    seen = await asyncio.to_thread(consume_all, bootstrap, "table", end)
    assert {k: v for k, v in seen.items() if k.startswith(b"key-")} == {k: v for k, (_, v) in latest.items()}
    await wait_compacted(brokers, "table", produced, tombstones_gone=False)
    assert any(v is None for _, v in latest.values())
    for b in brokers:
        assert metric(b, "log_cleaner_bytes_read_total") > 0
        assert metric(b, "log_cleaner_bytes_written_total") > 0
    # delete.retention.ms lowered live: the next pass (new dirty data) removes the tombstones.
    applied_before = [_topic_notifications(b, "table") for b in brokers]
    r = configs(zk_server.connect_string, "--entity-type", "topics", "--entity-name", "table", "--alter",
                "--add-config", "delete.retention.ms=0")
    assert r.returncode == 0, r.stderr
    # Every broker has applied it (a fixed second before: a loaded machine could be later, and the
    # pass below would keep the tombstones under the old delete.retention.ms).
    await wait_for("delete.retention.ms=0 applied on every broker",
                   lambda: all(_topic_notifications(b, "table") > n for b, n in zip(brokers, applied_before, strict=True)), 60)
    produced |= await asyncio.to_thread(produce_records, bootstrap, "table", filler(3 * SEGMENT // 200, "b"))
    await wait_compacted(brokers, "table", produced, tombstones_gone=True)
    # The log reads whole from the start, offsets as produced.
    seen = await asyncio.to_thread(consume_all, bootstrap, "table", max(produced) + 1)
    assert {k: v for k, v in seen.items() if k.startswith(b"key-")} == {
        k: v for k, (_, v) in latest.items() if v is not None}


def wait_exit(broker: BrokerProcess, timeout: float = 120) -> int:
    assert broker.proc is not None
    return broker.proc.wait(timeout)


def set_topic_config(zk: str, topic: str, items: str) -> None:
    r = configs(zk, "--entity-type", "topics", "--entity-name", topic, "--alter", "--add-config", items)
    assert r.returncode == 0, r.stderr


def log_since(broker: BrokerProcess, position: int) -> str:
    return broker.log_path.read_bytes()[position:].decode(errors="replace")


@pytest.mark.parametrize("points", [("cleaning", "cleaned", "swapped", "replacing")])
async def test_kill_9_during_cleaning(broker_factory, zk_server, points: tuple[str, ...],  # noqa: ANN001
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    zk = zk_server.connect_string
    # Each restart after a kill -9 waits for the dead process's ZooKeeper session to expire before
    # it registers (broker.waiting_for_previous_session): eight times here, so a shorter session
    # than FAST's 6 s (still 3x ZooKeeper's minimum of two 500 ms ticks) saves some 25 s of waiting.
    b = broker_factory(0, metrics=True, **(OPTS | {"zookeeper_session_timeout_ms": "3000"}))
    await create_topic(b, "kv", 1, 1, configs={"cleanup.policy": "delete", "segment.bytes": "50000",
                                                "min.cleanable.dirty.ratio": "0.01"})
    produced: Produced = {}
    for round_, point in enumerate(points):
        # Dirty data the cleaner leaves alone (policy delete) until the broker restarts with the
        # kill point set and the policy compact: that start's first pass reaches the point.
        set_topic_config(zk, "kv", "cleanup.policy=delete")
        await asyncio.sleep(0.5)
        produced |= await asyncio.to_thread(produce_records, b.bootstrap, "kv", workload(6000, 10 + round_))
        produced |= await asyncio.to_thread(produce_records, b.bootstrap, "kv", filler(300, point))
        b.kill()
        set_topic_config(zk, "kv", "cleanup.policy=compact")
        monkeypatch.setenv(KILL_AT_ENV, point)
        b.start(wait=False)
        code = await asyncio.to_thread(wait_exit, b)
        assert code == -9, f"the broker did not stop at {point}: exit {code}\n{b.log()[-3000:]}"
        monkeypatch.delenv(KILL_AT_ENV)
        # What the kill left: the files of the step it interrupted.
        names = [p.name for p in (b.log_dir / "kv-0").iterdir()]
        left = {"cleaning": ".log.cleaned", "cleaned": ".timeindex.cleaned", "swapped": ".log.swap",
                "replacing": ".log.deleted"}[point]
        assert any(n.endswith(left) for n in names), (point, sorted(names))
        if point == "replacing":
            assert any(n.endswith(".log.swap") for n in names)
        restarted_at = b.log_path.stat().st_size
        b.start()
        # Readable, every key's latest value there, offsets as produced.
        end = max(produced) + 1
        seen = await asyncio.to_thread(consume_all, b.bootstrap, "kv", end)
        latest = latest_of(produced)
        assert {k: v for k, v in seen.items() if k.startswith(b"key-")} == {k: v for k, (_, v) in latest.items()}
        for offset, key, value in on_disk(b, "kv"):
            assert produced[offset] == (key, value)
        # Cleaning resumes: a pass completes after the restart, and leaves the workload compacted.
        await wait_for(f"a cleaning pass after the kill at {point}",
                       lambda at=restarted_at: "cleaner.cleaned" in log_since(b, at), timeout=120)
        await wait_compacted([b], "kv", produced, tombstones_gone=False)
        leftovers = [p.name for p in (b.log_dir / "kv-0").iterdir() if p.suffix in (".cleaned", ".swap")]
        assert not leftovers, leftovers


async def test_cleaner_throttle_holds_its_rate(broker_factory, zk_server) -> None:  # noqa: ANN001
    rate = 200_000
    b = broker_factory(0, metrics=True, **OPTS, log_cleaner_io_max_bytes_per_second=str(rate))
    await create_topic(b, "slow", 1, 1, configs={"cleanup.policy": "delete", "segment.bytes": "262144",
                                                  "min.cleanable.dirty.ratio": "0.01"})
    rng = random.Random(3)
    records = [(b"key-%03d" % rng.randrange(300), b"v" * 1000) for _ in range(6000)]  # ~6 MB dirty
    await asyncio.to_thread(produce_records, b.bootstrap, "slow", records + filler(3000, "t"))
    # Compaction switched on live, once the whole log is there: one pass of ~12 MB of cleaner I/O.
    r = configs(zk_server.connect_string, "--entity-type", "topics", "--entity-name", "slow", "--alter",
                "--add-config", "cleanup.policy=compact")
    assert r.returncode == 0, r.stderr

    def cleaner_bytes() -> float:
        return metric(b, "log_cleaner_bytes_read_total") + metric(b, "log_cleaner_bytes_written_total")

    def process_io() -> int:
        # Bytes the broker process read and wrote through syscalls: with no client traffic in the
        # window, that is the cleaner's preads and writes (and a few KB of metrics scrapes).
        assert b.proc is not None
        fields = dict(line.split(": ") for line in open(f"/proc/{b.proc.pid}/io").read().splitlines())
        return int(fields["rchar"]) + int(fields["wchar"])

    await wait_for("the cleaner started", lambda: cleaner_bytes() > 0, timeout=60)
    await asyncio.sleep(3)  # past the first burst of the token bucket
    t0, v0, io0 = time.monotonic(), cleaner_bytes(), process_io()
    await asyncio.sleep(30)
    t1, v1, io1 = time.monotonic(), cleaner_bytes(), process_io()
    assert "cleaner.cleaned" not in b.log(), "the pass ended inside the window: the measure would be low"
    measured = (v1 - v0) / (t1 - t0)
    syscalls = (io1 - io0) / (t1 - t0)
    print(f"cleaner I/O over {t1 - t0:.1f} s: {measured:.0f} B/s by its counters, {syscalls:.0f} B/s by the "
          f"process's read/write syscalls, against a bound of {rate}")
    assert abs(measured - rate) <= 0.1 * rate, f"cleaner I/O {measured:.0f} B/s against a bound of {rate}"
    assert abs(syscalls - rate) <= 0.1 * rate, f"process I/O {syscalls:.0f} B/s against a bound of {rate}"
    # The bound is a dynamic broker config, as in Kafka 2.8: lowered on the cluster default, applied live.
    lower = 100_000
    r = configs(zk_server.connect_string, "--entity-type", "brokers", "--entity-default", "--alter",
                "--add-config", f"log.cleaner.io.max.bytes.per.second={lower}")
    assert r.returncode == 0, r.stderr
    await asyncio.sleep(12)  # the 11 one-second samples recorded at the old rate age out
    t0, v0 = time.monotonic(), cleaner_bytes()
    await asyncio.sleep(10)
    t1, v1 = time.monotonic(), cleaner_bytes()
    assert "cleaner.cleaned" not in b.log()
    measured = (v1 - v0) / (t1 - t0)
    print(f"after lowering it: {measured:.0f} B/s against a bound of {lower}")
    assert abs(measured - lower) <= 0.1 * lower, f"cleaner I/O {measured:.0f} B/s against a bound of {lower}"


async def test_a_compacted_topic_refuses_a_record_without_a_key(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory(0, **OPTS)
    await create_topic(b, "keyed", 2, 1, configs={"cleanup.policy": "compact"})
    async with await connect(b) as c:
        bad = await produce(c, "keyed", 0, [(b"k", b"1"), (None, b"2")], acks=1)
        assert bad["error_code"] == ErrorCode.INVALID_RECORD, bad
        good = await produce(c, "keyed", 1, [(b"k", b"1")], acks=1)
        assert good["error_code"] == 0, good
    # A real client (Produce v3+, RecordBatch v2): the same answer, delivered as the record's error.
    errors: list[int] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "message.send.max.retries": 0, "enable.idempotence": False})
    p.produce("keyed", value=b"3", partition=0, on_delivery=lambda err, msg: errors.append(err.code() if err else 0))
    assert p.flush(30) == 0
    assert errors == [KafkaError.INVALID_RECORD], errors
    assert on_disk(b, "keyed") == []
    assert [k for _, k, _ in decode_records_of(b, "keyed", 1)] == [b"k"]


def decode_records_of(b: BrokerProcess, topic: str, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in decode_records(partition_bytes(b, topic, partition))]



def batch_heads(broker: BrokerProcess, topic: str) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, producer id, record count) of each batch on disk."""
    data = partition_bytes(broker, topic, 0)
    out, pos = [], 0
    while pos + RECORD_BATCH_HEADER_SIZE <= len(data):
        (base, length, _, _, _, _, last_delta, _, _, pid, _, _, count) = RECORD_BATCH_HEADER.unpack_from(data, pos)
        out.append((base, base + last_delta, pid, count))
        pos += 12 + length
    return out


async def test_an_idempotent_producers_last_batch_stays_as_an_empty_header(broker_factory, zk_server) -> None:  # noqa: ANN001
    b = broker_factory(0, **OPTS)
    await create_topic(b, "idem", 1, 1, configs={"cleanup.policy": "delete", "segment.bytes": "50000",
                                                  "min.cleanable.dirty.ratio": "0.01"})
    offsets: list[int] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    p.produce("idem", key=b"a", value=b"1", partition=0, on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert p.flush(30) == 0 and len(offsets) == 1
    mine = offsets[0]
    # Another producer supersedes the record; records of other keys push both out of the active segment.
    await asyncio.to_thread(produce_records, b.bootstrap, "idem", [(b"a", b"2")] + filler(400, "i"))
    (head,) = [h for h in batch_heads(b, "idem") if h[0] == mine]
    assert head[2] >= 0 and head[3] == 1
    set_topic_config(zk_server.connect_string, "idem", "cleanup.policy=compact")

    def emptied() -> bool:
        return [h for h in batch_heads(b, "idem") if h[0] == mine] == [(mine, mine, head[2], 0)]

    # Kafka's rule: the batch holding a live producer's last sequence stays, with no records.
    await wait_for("the producer's last batch kept as an empty header", emptied, timeout=60)
    seen = await asyncio.to_thread(consume_all, b.bootstrap, "idem", mine + 2)
    assert seen[b"a"] == b"2"
    # The producer goes on with its next sequence number: accepted.
    errors: list[object] = []
    p.produce("idem", key=b"a", value=b"3", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0 and errors == [None]
