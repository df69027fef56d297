"""A data directory written by the release before RecordBatch v2 (magic 1, tests/fixtures/magic1-log,
made by tests/fixtures/make_magic1_log.py from commit fe0b709) stays readable: the new broker opens
it (trusting its index after a clean shutdown, or recovering it by a full scan), real clients read
every old message, new v2 batches follow in the same segment, and recovery after a kill -9 scans
the mixed segment."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from aiokafka import AIOKafkaProducer
from kafka.record import MemoryRecords

from tests.fixtures.make_magic1_log import FIXTURE, TOPIC, fixture_messages
from tests.support.messages import read_back_with_kafka_python
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic

NEW = 300


def new_messages() -> list[tuple[bytes, bytes, int, list[tuple[str, bytes]]]]:
    return [(f"new-{i}".encode(), f"v2-{i}".encode() * (i % 3 + 1), 1_800_000_000_000 + i,
             [("n", str(i).encode())] * (i % 2)) for i in range(NEW)]


def magics(blob: bytes) -> list[int]:
    out = []
    records = MemoryRecords(blob)
    while (batch := records.next_batch()) is not None:
        out.append(batch.magic)
    return out


@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
async def test_new_broker_reads_and_extends_an_old_log(broker_factory, shutdown: str) -> None:  # noqa: ANN001
    old = fixture_messages()
    # A 3 s ZooKeeper session (not 6 s): the restart after kill -9 waits for the dead one to expire.
    b = broker_factory(0, start=False, zookeeper_session_timeout_ms="3000")
    shutil.copytree(FIXTURE / f"{TOPIC}-0", b.log_dir / f"{TOPIC}-0")
    if shutdown == "unclean":  # no marker, no index: the whole segment is scanned and its index rebuilt
        (b.log_dir / f"{TOPIC}-0" / ".clean_shutdown").unlink()
        (b.log_dir / f"{TOPIC}-0" / "00000000000000000000.index").unlink()
    b.start()
    await create_topic(b, TOPIC, assignment={0: [0]})

    got, tail = await asyncio.to_thread(read_back_with_kafka_python, b.bootstrap, TOPIC, len(old), 450)
    assert got == [(i, k, v) for i, (k, v, _) in enumerate(old)]
    assert tail[0] == (450, old[450][0], old[450][1])

    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, acks=1, linger_ms=5, enable_idempotence=False)
    await p.start()
    try:
        futures = [await p.send(TOPIC, key=k, value=v, partition=0, timestamp_ms=t, headers=h)
                   for k, v, t, h in new_messages()]
        metas = await asyncio.gather(*futures)
    finally:
        await p.stop()
    assert sorted(m.offset for m in metas) == list(range(len(old), len(old) + NEW))

    expected = [(i, k, v) for i, (k, v, _) in enumerate(old)] + [
        (len(old) + i, k, v) for i, (k, v, _, _) in enumerate(new_messages())]
    # A kill -9 leaves no clean-shutdown marker: the restart recovers the mixed segment by scanning it.
    b.kill()
    b.start()
    got, tail = await asyncio.to_thread(read_back_with_kafka_python, b.bootstrap, TOPIC, len(expected),
                                        len(old) + 10)
    assert got == expected
    assert tail[0] == expected[len(old) + 10]

    blob = partition_bytes(b, TOPIC, 0)
    kinds = magics(blob)
    assert set(kinds[:kinds.index(2)]) == {1} and set(kinds[kinds.index(2):]) == {2}
    records = MemoryRecords(blob)
    stored = []
    while (batch := records.next_batch()) is not None:
        if batch.magic == 2:
            stored.extend((r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in batch)
    assert stored == [(len(old) + i, k, v, t, h) for i, (k, v, t, h) in enumerate(new_messages())]
