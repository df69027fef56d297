"""broker.network.ConnectionLimits on its own: counts per IP and in total, and the queued request
bytes (non-strict, like Kafka's memory pool: a request larger than the bound still goes in)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker.network import ConnectionLimits


def conn(ip: str) -> Any:  # noqa: ANN401
    return SimpleNamespace(ip=ip)


def test_per_ip_override_and_total() -> None:
    limits = ConnectionLimits(max_connections=3, max_per_ip=2, per_ip_overrides={"10.0.0.9": 1})
    a, b, c = conn("10.0.0.1"), conn("10.0.0.1"), conn("10.0.0.1")
    assert limits.admit(a) is None and limits.admit(b) is None
    assert "max.connections.per.ip" in (limits.admit(c) or "")
    assert limits.admit(conn("10.0.0.9")) is None
    assert "max.connections.per.ip (1)" in (limits.admit(conn("10.0.0.9")) or "")
    assert "max.connections (3)" in (limits.admit(conn("10.0.0.2")) or "")
    limits.release(a)
    assert limits.admit(c) is None
    assert limits.total == 3 and limits.per_ip == {"10.0.0.1": 2, "10.0.0.9": 1}


async def test_queued_bytes_wait_while_over_the_bound() -> None:
    limits = ConnectionLimits(queued_max_bytes=100)
    order: list[str] = []
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        release = await limits.reserve(500)  # larger than the bound: admitted, non-strict
        order.append("first in")
        first_in.set()
        await release_first.wait()
        release()
        order.append("first out")

    async def second() -> None:
        await first_in.wait()
        release = await limits.reserve(10)
        order.append("second in")
        release()

    tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
    await first_in.wait()
    await asyncio.sleep(0.01)
    assert order == ["first in"] and limits.queued_bytes == 500  # the second waits
    release_first.set()
    await asyncio.gather(*tasks)
    assert order == ["first in", "first out", "second in"]
    assert limits.queued_bytes == 0


async def test_a_release_counts_once() -> None:
    limits = ConnectionLimits(queued_max_bytes=100)
    release = await limits.reserve(500)
    release()  # an acks=all produce now only waits for its followers
    assert limits.queued_bytes == 0
    other = await limits.reserve(10)  # a follower's fetch is read meanwhile
    release()  # answered later: counted out once only
    assert limits.queued_bytes == 10
    other()
    assert limits.queued_bytes == 0


async def test_unbounded_counts_nothing() -> None:
    limits = ConnectionLimits()
    release = await limits.reserve(1 << 30)
    assert limits.queued_bytes == 0
    release()
    assert limits.queued_bytes == 0
