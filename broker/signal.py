"""A broadcast for purgatories: waiters wake on the next `fire()` after they began to wait.

One signal per kind of event (appends and high-watermark moves; metadata updates)
replaces per-request timers and per-partition watch lists: a woken waiter simply
re-checks its own condition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


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
