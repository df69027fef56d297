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
