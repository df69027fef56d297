"""Wake-ups for purgatories: waiters wake on the next `fire()` after they began to wait.

`Signal` is a broadcast (metadata updates: every waiter re-checks its own condition).
`KeyedSignal` wakes only the waiters of the keys fired (appends and high-watermark moves, keyed
by partition, as Kafka's purgatory watch lists): an append to one partition costs nothing to a
long poll over a thousand others. Its bookkeeping is broker.watchers.Watchers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Iterable

from broker.watchers import Watchers


class Signal:
    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None

    def fire(self) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)
        self._fut = None

    async def wait(self, timeout: float) -> None:
        if self._fut is None:
            self._fut = asyncio.get_running_loop().create_future()
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that
        # arrives as the awaited future completes, and this future completes on every append,
        # so a long poll whose client left (cancelled by the listener) went on waiting.
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._fut)
        except TimeoutError:
            pass

    async def wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self.wait(remaining)
        return True


class KeyedSignal:
    """Waiters on keys: `fire(key)` wakes those waiting on `key`, `fire_all()` every one."""

    def __init__(self) -> None:
        self._watchers: Watchers[Hashable, asyncio.Future[None]] = Watchers(self._now)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._cached_loop: asyncio.AbstractEventLoop | None = None

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The loop it is used on, found once: each asyncio.get_running_loop() costs a getpid()
        system call (2-3 us on this machine's virtual CPUs), and every wait and timer asked for it.
        Found again if that loop was closed (a signal outliving its loop, in tests)."""
        loop = self._cached_loop
        if loop is None or loop.is_closed():
            loop = self._cached_loop = asyncio.get_running_loop()
        return loop

    def _now(self) -> float:
        return self._loop().time()

    def watching(self, key: Hashable) -> int:
        return self._watchers.watching(key)

    def __len__(self) -> int:
        return len(self._watchers)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> None:
        """Until one of `keys` fires after this call, or `timeout` seconds."""
        fut: asyncio.Future[None] = self._loop().create_future()
        self._watchers.watch(fut, keys, timeout)
        self._arm()
        try:
            await fut
        finally:
            self._watchers.cancel(fut)  # cancelled (its request abandoned): off every list

    def fire(self, key: Hashable) -> None:
        for fut in self._watchers.fire(key):
            if not fut.done():
                fut.set_result(None)

    def fire_all(self) -> None:
        for fut in self._watchers.fire_all():
            if not fut.done():
                fut.set_result(None)

    def _arm(self) -> None:
        """One loop timer, at the earliest deadline of a waiter still waiting."""
        deadline = self._watchers.next_deadline()
        if deadline is None:
            return
        if self._timer is not None:
            if self._timer_at <= deadline:
                return
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self._loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        for fut in self._watchers.expire():
            if not fut.done():
                fut.set_result(None)
        self._arm()
