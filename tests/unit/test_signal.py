"""broker.signal: the one wake-up both purgatories wait on."""

from __future__ import annotations

import asyncio

import pytest

from broker.signal import Signal


async def test_a_cancellation_arriving_with_a_fire_is_not_lost() -> None:
    # The listener cancels a long poll whose client left; an append fires the signal in the same
    # loop turn. Python 3.11's wait_for returned normally then, and the long poll went on waiting.
    sig = Signal()
    waiter = asyncio.create_task(sig.wait(3600))
    await asyncio.sleep(0)  # the waiter is parked on the signal
    sig.fire()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_fire_wakes_and_timeout_returns() -> None:
    sig = Signal()
    waiter = asyncio.create_task(sig.wait(3600))
    await asyncio.sleep(0)
    sig.fire()
    await asyncio.wait_for(waiter, 1)
    assert await sig.wait_until(lambda: False, 0.01) is False
