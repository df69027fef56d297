"""broker.watchers.Watchers on an injected clock, and broker.signal.KeyedSignal on the event loop:
an append wakes only the operations that wait on its partition."""

from __future__ import annotations

import asyncio

from broker.signal import KeyedSignal
from broker.watchers import Watchers


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fire_wakes_only_the_operations_watching_that_key() -> None:
    w: Watchers[tuple[str, int], str] = Watchers(Clock())
    w.watch("idle-consumer", [("idle", p) for p in range(1000)], 0.5)
    w.watch("busy-consumer", [("busy", 0)], 0.5)
    w.watch("follower", [("busy", 0), ("idle", 7)], 0.5)
    assert w.fire(("busy", 1)) == []
    assert w.fire(("busy", 0)) == ["busy-consumer", "follower"]  # oldest first
    assert "follower" not in w and "busy-consumer" not in w
    # The follower left every list it was on, the idle consumer's lists are untouched.
    assert w.watching(("idle", 7)) == 1 and w.watching(("busy", 0)) == 0
    assert w.fire(("idle", 7)) == ["idle-consumer"]
    assert len(w) == 0 and all(w.watching(("idle", p)) == 0 for p in range(1000))


def test_an_operation_is_woken_once_even_when_several_of_its_keys_fire() -> None:
    w: Watchers[str, str] = Watchers(Clock())
    w.watch("fetch", ["a", "b", "a"], 1.0)
    assert w.watching("a") == 1
    assert w.fire("a") == ["fetch"]
    assert w.fire("b") == []


def test_deadlines_expire_by_the_injected_clock() -> None:
    clock = Clock()
    w: Watchers[str, str] = Watchers(clock)
    w.watch("short", ["a"], 0.1)
    w.watch("long", ["a"], 0.5)
    w.watch("gone", ["b"], 0.05)
    assert w.next_deadline() == 100.05
    w.cancel("gone")  # its request was abandoned
    assert w.next_deadline() == 100.1
    assert w.expire() == []
    clock.now = 100.1
    assert w.expire() == ["short"]
    assert w.watching("a") == 1 and w.next_deadline() == 100.5
    clock.now = 101.0
    assert w.expire() == ["long"]
    assert w.next_deadline() is None and len(w) == 0


def test_watching_again_replaces_the_old_deadline() -> None:
    clock = Clock()
    w: Watchers[str, str] = Watchers(clock)
    w.watch("fetch", ["a"], 0.1)
    w.watch("fetch", ["b"], 1.0)
    assert w.watching("a") == 0 and w.watching("b") == 1
    clock.now = 100.5
    assert w.expire() == []  # the first wait's deadline is stale
    assert w.next_deadline() == 101.0


def test_fire_all_wakes_everything() -> None:
    w: Watchers[str, str] = Watchers(Clock())
    w.watch("x", ["a"], 1.0)
    w.watch("y", ["b"], 1.0)
    assert sorted(w.fire_all()) == ["x", "y"]
    assert len(w) == 0 and w.next_deadline() is None


async def test_keyed_signal_wakes_the_right_waiter() -> None:
    signal = KeyedSignal()
    woken: list[str] = []

    async def waiter(name: str, keys: list[tuple[str, int]], timeout: float) -> None:
        await signal.wait(keys, timeout)
        woken.append(name)

    idle = asyncio.create_task(waiter("idle", [("idle", p) for p in range(1000)], 30))
    busy = asyncio.create_task(waiter("busy", [("busy", 0)], 30))
    await asyncio.sleep(0)
    assert signal.watching(("busy", 0)) == 1 and signal.watching(("idle", 999)) == 1
    signal.fire(("other", 0))
    signal.fire(("busy", 0))
    await asyncio.wait_for(busy, 2)
    assert woken == ["busy"] and not idle.done()
    idle.cancel()  # an abandoned long poll leaves every watch list
    await asyncio.gather(idle, return_exceptions=True)
    assert len(signal) == 0 and signal.watching(("idle", 0)) == 0


async def test_keyed_signal_times_out() -> None:
    signal = KeyedSignal()
    await asyncio.wait_for(signal.wait([("t", 0)], 0.01), 2)  # returns at its deadline, no fire
    assert len(signal) == 0
