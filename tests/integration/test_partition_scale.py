"""Many partitions within a descriptor limit (issue 21, deliverable 4), on real brokers with a
lowered soft RLIMIT_NOFILE so that a few hundred partitions reach it.

Before: a partition held three descriptors for good (.log, .index, .timeindex), and the first
EMFILE took the whole log directory offline. Now only active segments hold one for good, older
segments reopen on demand under `log.max.open.segment.files` (three quarters of the soft limit
by default), and a partition that finds no descriptor is answered KAFKA_STORAGE_ERROR alone.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records.records import decode_records
from tests.support.brokers import BrokerProcess
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, fetch, produce


def value(p: int, i: int) -> bytes:
    return b"p%04d-m%02d-" % (p, i) + bytes([p % 251]) * 200


async def produce_all(b: BrokerProcess, topic: str, partitions: range, rounds: int) -> None:
    async with await connect(b) as conn:
        for i in range(rounds):
            for p in partitions:
                resp = await produce(conn, topic, p, [(b"k%d" % p, value(p, i))])
                assert resp["error_code"] == 0, (p, i, resp)


async def read_all(b: BrokerProcess, topic: str, partitions: range, rounds: int) -> None:
    """Every partition from offset 0, every byte of every value as produced (a fetch reads one
    segment, so each partition is fetched from its next offset until it has them all)."""
    async with await connect(b) as conn:
        for start in range(partitions.start, partitions.stop, 50):
            chunk = list(range(start, min(start + 50, partitions.stop)))
            got: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {p: [] for p in chunk}
            for _ in range(rounds + 1):
                want = [p for p in chunk if len(got[p]) < rounds]
                if not want:
                    break
                resp = await fetch(conn, [(topic, p, len(got[p]), 1 << 20) for p in want], version=4)
                for p in want:
                    part = resp[(topic, p)]
                    assert part["error_code"] == 0, (p, part["error_code"])
                    got[p] += [(r.offset, r.key, r.value) for r in decode_records(part["records"] or b"")]
            for p in chunk:
                assert got[p] == [(i, b"k%d" % p, value(p, i)) for i in range(rounds)], p


async def test_more_partitions_than_eager_descriptors_allow(broker_factory: Callable[..., BrokerProcess]) -> None:
    """300 partitions of 3 segments each (900 segment files, 2,700 files with their indexes) under a
    soft limit of 512: created, produced to, read back byte for byte, and again after a restart."""
    b = broker_factory(0, nofile=512)
    n, rounds = 300, 3
    # segment.bytes below two values: every produce after the first rolls, so reads reopen old segments.
    await create_topic(b, "many", n, configs={"segment.bytes": "400"}, timeout=120)
    await produce_all(b, "many", range(n), rounds)
    assert b.open_fds() < 512
    await read_all(b, "many", range(n), rounds)
    assert b.open_fds() < 512
    segments = sorted(b.log_dir.glob("many-*/*.log"))
    assert len(segments) >= n * rounds  # more segment files than the limit: most were reopened on demand

    assert b.stop() == 0, b.log()
    b.start()
    async with await connect(b) as conn:
        await wait_for("every partition led again", lambda: _all_led(conn, "many", n), timeout=120)
    await read_all(b, "many", range(n), rounds)
    await produce_all(b, "many", range(0, n, 7), 1)  # and they take appends again
    assert b.open_fds() < 512
    assert "log.open_files_exhausted" not in b.log_path.read_text()


async def _all_led(conn, topic: str, n: int) -> bool:  # type: ignore[no-untyped-def]
    md = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
    parts = md["topics"][0]["partitions"]
    return len(parts) == n and all(p["leader_id"] >= 0 for p in parts)


async def test_at_the_descriptor_limit_storage_error_for_those_partitions_only(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    """Soft limit 256 (192 segment files): a second topic finds no descriptor for its last
    partitions. Those answer KAFKA_STORAGE_ERROR, everything else is served, new connections are
    accepted, the controller sends no LeaderAndIsr again, and the event names the limits."""
    b = broker_factory(0, nofile=256)
    await create_topic(b, "first", 150)
    await produce_all(b, "first", range(150), 1)
    # CreateTopics succeeds (the assignment is written); the leader is this broker, which cannot
    # open the logs past the bound.
    await create_topic(b, "second", 80, check=False, timeout=20)
    text = await wait_for("the refusal logged", lambda: _logged(b, "log.open_files_exhausted"), timeout=30)
    assert "soft_limit=256" in text and "max_open_segment_files=192" in text
    async with await connect(b) as conn:
        refused, served = [], []
        for p in range(80):
            resp = await produce(conn, "second", p, [(None, b"x%d" % p)])
            (served if resp["error_code"] == 0 else refused).append((p, resp["error_code"]))
        assert refused and served
        assert {code for _, code in refused} == {ErrorCode.KAFKA_STORAGE_ERROR}
        assert len(served) + 150 <= 192
        # The first topic is untouched: read back and written to.
        await read_all(b, "first", range(150), 1)
        assert (await produce(conn, "first", 7, [(b"k7", b"more")]))["error_code"] == 0
    # New connections still work (the reserve is left to sockets), and the process is alive.
    for _ in range(5):
        async with await connect(b) as conn:
            await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": "first"}]})
    assert b.proc is not None and b.proc.poll() is None
    # One LeaderAndIsr each: the controller does not send the same request again and again.
    errors = _count(b, "partition.storage_error")
    assert errors == len(refused)
    await asyncio.sleep(5)
    assert _count(b, "partition.storage_error") == errors
    assert _count(b, "controller.send_retry") == 0
    assert "log_dir.failed" not in b.log_path.read_text()
    assert "controller.replicas_offline" in b.log_path.read_text()


def _logged(b: BrokerProcess, event: str) -> str | None:
    for line in b.log_path.read_text().splitlines():
        if f"event='{event}'" in line or f'"event": "{event}"' in line:
            return line
    return None


def _count(b: BrokerProcess, event: str) -> int:
    return len(re.findall(rf"event='{re.escape(event)}'", b.log_path.read_text()))


async def test_a_replica_that_cannot_open_its_log_loses_leadership_to_another(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    """Kafka's onReplicasBecomeOffline: broker 1 (soft limit 256, 192 segment files) is the first
    replica of partitions it cannot open; it answers KAFKA_STORAGE_ERROR, and the controller
    elects broker 0 from the ISR for exactly those, once, and clients produce to them there."""
    b0 = broker_factory(0)
    b1 = broker_factory(1, nofile=256)
    await create_topic(b0, "fill", assignment={p: [1] for p in range(188)}, timeout=60)
    await create_topic(b0, "moved", assignment={p: [1, 0] for p in range(12)}, timeout=60)

    async def leaders() -> dict[int, int] | None:
        async with await connect(b0) as conn:
            md = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": "moved"}]})
        found = {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]}
        return found if 0 in found.values() else None
    led = await wait_for("partitions broker 1 cannot open led by broker 0", leaders, timeout=60)
    on_0 = sorted(p for p, leader in led.items() if leader == 0)
    on_1 = sorted(p for p, leader in led.items() if leader == 1)
    assert on_0 and on_1 and len(on_1) <= 192 - 188
    async with await connect(b0) as conn:
        for p in on_0:
            assert (await produce(conn, "moved", p, [(None, b"to broker 0")]))["error_code"] == 0
    async with await connect(b1) as conn:
        for p in on_1:
            assert (await produce(conn, "moved", p, [(None, b"to broker 1")]))["error_code"] == 0
    # Broker 1 said so once per partition; nothing was sent to it again for them.
    await asyncio.sleep(3)
    assert _count(b1, "partition.storage_error") == len(on_0)
    offline = [line for broker in (b0, b1) for line in broker.log_path.read_text().splitlines()
               if "controller.replicas_offline" in line]
    assert len(offline) == 1 and f"partitions={len(on_0)}" in offline[0], offline
