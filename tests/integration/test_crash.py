"""kill -9 during a produce stream: every acknowledged message survives the restart."""

from __future__ import annotations

import asyncio
import os
import signal

from protocol.records.message_set import decode_records
from tests.support.topics import create_topic, wait_leaders
from tests.support.wire import connect, fetch, produce


async def test_kill_minus_nine_keeps_acknowledged(broker) -> None:  # noqa: ANN001
    acked: dict[int, bytes] = {}
    async with await connect(broker) as conn:
        await create_topic(conn, "crash", 2)

    async def stream(partition: int) -> None:
        c = await connect(broker)
        i = 0
        try:
            while True:
                batch = [(f"k{partition}-{i + j}".encode(), os.urandom(200)) for j in range(50)]
                r = await produce(c, "crash", partition, batch, acks=-1)
                assert r["error_code"] == 0
                for j, (_, v) in enumerate(batch):
                    acked[(partition << 40) | (r["base_offset"] + j)] = v
                i += 50
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            await c.close()

    tasks = [asyncio.create_task(stream(p)) for p in (0, 1)]
    while len(acked) < 20000:
        await asyncio.sleep(0.05)
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGKILL)
    broker.proc.wait()
    await asyncio.gather(*tasks)
    assert len(acked) >= 20000

    broker.start()
    async with await connect(broker) as conn:
        await wait_leaders(conn, "crash", 2)
        for p in (0, 1):
            stored: dict[int, bytes] = {}
            offset = 0
            while True:
                got = (await fetch(conn, [("crash", p, offset, 4 << 20)]))[("crash", p)]
                assert got["error_code"] == 0
                recs = decode_records(got["records"])
                if not recs:
                    break
                for r in recs:
                    stored[r.offset] = r.value
                offset = recs[-1].offset + 1
            mine = {k & ((1 << 40) - 1): v for k, v in acked.items() if k >> 40 == p}
            missing = [o for o in mine if stored.get(o) != mine[o]]
            assert not missing, f"partition {p}: {len(missing)} acknowledged messages lost"
            assert sorted(stored) == list(range(len(stored)))  # no holes after recovery
        # The broker serves again after recovery.
        r = await produce(conn, "crash", 0, [(b"after", b"restart")])
        assert r["error_code"] == 0


async def _read_all(conn, topic: str, partition: int) -> dict[int, bytes]:  # noqa: ANN001
    stored: dict[int, bytes] = {}
    offset = 0
    while True:
        got = (await fetch(conn, [(topic, partition, offset, 4 << 20)]))[(topic, partition)]
        assert got["error_code"] == 0
        recs = decode_records(got["records"])
        if not recs:
            return stored
        for r in recs:
            stored[r.offset] = r.value
        offset = recs[-1].offset + 1


async def test_kill_after_a_clean_restart_recovers_and_cuts_a_torn_tail(broker) -> None:  # noqa: ANN001
    """The clean-shutdown marker a SIGTERM leaves is consumed when the broker starts, so
    a kill -9 after that restart recovers the logs again: a torn batch at the end of a segment
    (a write cut short) is cut off, and every acknowledged message is there, without holes."""
    topic = "crash-after-clean"
    acked: dict[tuple[int, int], bytes] = {}

    async def produce_some(conn, tag: str) -> None:  # noqa: ANN001
        for p in (0, 1, 2):
            batch = [(f"{tag}-{p}-{i}".encode(), os.urandom(100)) for i in range(20)]
            r = await produce(conn, topic, p, batch, acks=-1)
            assert r["error_code"] == 0
            for i, (_, v) in enumerate(batch):
                acked[(p, r["base_offset"] + i)] = v

    async with await connect(broker) as conn:
        await create_topic(conn, topic, 3)
        await produce_some(conn, "before")
    assert broker.stop() == 0
    marker = broker.log_dir / ".kafka_cleanshutdown"  # one for the log dir, as Kafka's
    assert marker.exists()

    broker.start()
    async with await connect(broker) as conn:
        await wait_leaders(conn, topic, 3)
        assert not marker.exists()  # consumed at start-up: the next start recovers
        assert not list(broker.log_dir.glob("*/.clean_shutdown"))
        await produce_some(conn, "after")
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGKILL)
    broker.proc.wait()
    active = max((broker.log_dir / f"{topic}-0").glob("*.log"))
    whole = active.stat().st_size
    with open(active, "ab") as f:  # the head of a batch, its body never written
        f.write((1 << 40).to_bytes(8, "big") + (500).to_bytes(4, "big") + os.urandom(30))

    broker.start()
    async with await connect(broker) as conn:
        await wait_leaders(conn, topic, 3)
        assert active.stat().st_size == whole  # the torn tail is gone
        for p in (0, 1, 2):
            stored = await _read_all(conn, topic, p)
            mine = {o: v for (q, o), v in acked.items() if q == p}
            assert {o: stored.get(o) for o in mine} == mine, f"partition {p}: acknowledged messages lost"
            assert sorted(stored) == list(range(len(stored)))
        r = await produce(conn, topic, 0, [(b"next", b"value")])
        assert r["error_code"] == 0 and r["base_offset"] == 40  # right after the last whole batch
