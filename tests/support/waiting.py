"""Polling until a condition holds, for tests and benches."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from broker.zk.client import NoNodeError


async def wait_for(what: str, check: Callable[[], Any | Awaitable[Any]], timeout: float = 30.0,
                   interval: float = 0.1) -> Any:  # noqa: ANN401
    """Polls `check` (plain or async) until it returns something truthy, and returns that.

    A missing znode (NoNodeError) counts as not yet. Fails with AssertionError naming `what`
    and the last result after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = check()
            if inspect.isawaitable(last):
                last = await last
        except NoNodeError:
            last = None
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)
