"""The loop-stall diagnostic: a loop held by blocking code is reported, with where it was held."""

from __future__ import annotations

import asyncio
import time

import pytest
from structlog.testing import capture_logs

from broker.loop_watchdog import WATCHDOG_ENV, LoopWatchdog, from_environment


def _hold_the_loop(watchdog: LoopWatchdog, at_least_s: float) -> None:
    """Blocks the loop on purpose (what the watchdog is for) until the watching thread has seen
    it; on a busy machine that thread may be scheduled late, so no fixed length is assumed."""
    start = time.monotonic()
    while time.monotonic() - start < at_least_s or (not watchdog.stacks_taken and time.monotonic() - start < 10):
        time.sleep(0.01)


async def test_a_blocked_loop_is_reported_with_its_length_and_stack() -> None:
    watchdog = LoopWatchdog(threshold_s=0.02)
    with capture_logs() as events:
        watchdog.start()
        await asyncio.sleep(0.03)  # a few beats first
        _hold_the_loop(watchdog, 0.15)
        await asyncio.sleep(0.03)  # the next beat reports it
        watchdog.stop()
    stalls = [e for e in events if e["event"] == "event_loop.stalled"]
    assert stalls, events
    worst = max(stalls, key=lambda e: e["stalled_ms"])
    assert worst["stalled_ms"] >= 100
    # Sleeping is neither CPU nor waiting for one.
    assert worst["loop_cpu_ms"] < worst["stalled_ms"] / 2
    assert any("_hold_the_loop" in stack for stack in worst["stacks"]), worst["stacks"]


async def test_a_loop_that_keeps_beating_reports_nothing() -> None:
    watchdog = LoopWatchdog(threshold_s=0.5)
    with capture_logs() as events:
        watchdog.start()
        await asyncio.sleep(0.05)
        watchdog.stop()
    assert not [e for e in events if e["event"] == "event_loop.stalled"]


@pytest.mark.parametrize(("value", "on"), [("", False), ("0", False), ("x", False), ("20", True)])
def test_off_unless_the_environment_names_a_threshold(monkeypatch: pytest.MonkeyPatch, value: str, on: bool) -> None:
    monkeypatch.setenv(WATCHDOG_ENV, value)
    watchdog = from_environment()
    assert (watchdog is not None) == on
    if watchdog is not None:
        assert watchdog.threshold_s == pytest.approx(0.02)
