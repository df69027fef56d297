"""broker.server.stop_phase: each phase of a broker's shutdown is timed and logged, a phase that
hangs is given up at its limit and a phase that fails does not stop the ones after it (the logs
must still be closed and marked clean)."""

from __future__ import annotations

import asyncio

from broker.server import stop_phase


async def test_phases_run_in_order_whatever_the_ones_before_did() -> None:
    ran: list[str] = []
    phases: dict[str, float] = {}

    async def fails() -> None:
        ran.append("fails")
        raise RuntimeError("a peer went away")

    async def hangs() -> None:
        ran.append("hangs")
        await asyncio.Event().wait()

    async def logs() -> None:
        ran.append("logs")

    done = [await stop_phase(phases, "controlled_shutdown", fails, 5),
            await stop_phase(phases, "listener", hangs, 0.05),
            await stop_phase(phases, "logs", logs)]
    assert done == [False, False, True]  # a phase that raised or overran its bound did not complete
    assert ran == ["fails", "hangs", "logs"]
    assert list(phases) == ["controlled_shutdown", "listener", "logs"]
    assert all(seconds >= 0 for seconds in phases.values())
