"""Issue 15, bounds on produced records: `message.max.bytes` / `max.message.bytes` enforced, and a
compressed wrapper inflated only up to a bound tied to that limit (a gzip bomb is refused
without being inflated in full). Real ZooKeeper, a real broker process, real sockets."""

from __future__ import annotations

import asyncio
import time
import zlib

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import compression
from protocol.records.message_set import decode_records, encode_entry
from tests.support.topics import create_topic
from tests.support.wire import connect, fetch, produce

DEFAULT_MESSAGE_MAX_BYTES = 1048588  # Kafka 2.8's message.max.bytes
ENTRY_OVERHEAD = 34  # log overhead 12 + magic-1 head 14 + key and value lengths 8


def vm_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def gzip_bomb(inflated: int) -> bytes:
    """A gzip member of `inflated` zero bytes, built a MiB at a time (it is ~1/1000 of that)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    parts = [c.compress(block) for _ in range(inflated >> 20)]
    parts.append(c.flush())
    return b"".join(parts)


async def test_message_max_bytes_refuses_a_batch_just_over_the_limit(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "mmb")
        await create_topic(conn, "mmb-raised", configs={"max.message.bytes": "2000000"})
        over = b"v" * (DEFAULT_MESSAGE_MAX_BYTES + 1 - ENTRY_OVERHEAD)  # the entry is one byte over
        r = await produce(conn, "mmb", 0, [(None, over)])
        assert r["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        at = b"v" * (DEFAULT_MESSAGE_MAX_BYTES - ENTRY_OVERHEAD)
        assert (await produce(conn, "mmb", 0, [(None, at)]))["error_code"] == 0
        # The topic override raises the limit for its topic only.
        r = await produce(conn, "mmb-raised", 0, [(None, over)])
        assert r["error_code"] == 0
        got = await fetch(conn, [("mmb", 0, 0, 4 << 20), ("mmb-raised", 0, 0, 4 << 20)])
        assert [rec.value for rec in decode_records(got[("mmb", 0)]["records"])] == [at]
        assert [rec.value for rec in decode_records(got[("mmb-raised", 0)]["records"])] == [over]


async def test_gzip_bomb_is_refused_with_bounded_memory(broker) -> None:  # noqa: ANN001
    bomb = gzip_bomb(600 << 20)
    assert len(bomb) < 1 << 20
    wrapper = encode_entry(0, 1, compression.GZIP, 1_700_000_000_000, None, bomb)
    assert broker.proc is not None
    pid = broker.proc.pid
    async with await connect(broker) as conn, await connect(broker, client_id="bystander") as other:
        await create_topic(conn, "bomb")
        hwm_before = vm_kb(pid, "VmHWM")
        body = {"acks": 1, "timeout_ms": 5000,
                "topic_data": [{"name": "bomb", "partition_data": [{"index": 0, "records": wrapper}]}]}
        bomb_reply = asyncio.create_task(conn.request(ApiKey.PRODUCE, 2, body, 30))
        # Another client is answered meanwhile, promptly.
        latencies = []
        while not bomb_reply.done():
            t0 = time.monotonic()
            await asyncio.wait_for(other.request(ApiKey.METADATA, 1, {"topics": [{"name": "bomb"}]}), 2)
            latencies.append(time.monotonic() - t0)
            await asyncio.sleep(0.01)
        resp = await bomb_reply
        code = resp["responses"][0]["partition_responses"][0]["error_code"]
        assert code == ErrorCode.MESSAGE_TOO_LARGE
        hwm_after = vm_kb(pid, "VmHWM")
        # The bomb inflates to 600 MB; the broker may inflate at most 64 x message.max.bytes of it.
        assert hwm_after - hwm_before < 200 << 10, (hwm_before, hwm_after)
        assert all(lat < 2 for lat in latencies)
        # Nothing was appended, and the partition still takes records.
        assert (await produce(conn, "bomb", 0, [(b"k", b"v")]))["base_offset"] == 0
