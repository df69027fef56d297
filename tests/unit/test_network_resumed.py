"""network._Resumed: a request started in the reading task that has to wait continues in a task
from where it stopped; cancelled before that task's first step, what it waited on is cancelled
too, as a task cancels the future it waits on."""

from __future__ import annotations

import asyncio

from broker.network import _Resumed


async def test_a_request_cancelled_before_its_tasks_first_step_cancels_what_it_waited_on() -> None:
    loop = asyncio.get_running_loop()
    inner = loop.create_future()  # e.g. a gather of high-watermark waits
    seen: list[str] = []

    async def handling() -> bool:
        try:
            await inner
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return True

    coro = handling()
    first = coro.send(None)  # run eagerly up to the first wait, as Connection.start does
    assert first is inner
    task = loop.create_task(_Resumed(coro, first))
    task.cancel()  # before the task's first step (the peer went)
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert inner.cancelled()
    assert seen == ["cancelled"]


async def test_a_resumed_request_takes_up_its_wait_and_finishes() -> None:
    loop = asyncio.get_running_loop()
    inner = loop.create_future()

    async def handling() -> bool:
        return await inner

    coro = handling()
    first = coro.send(None)
    task = loop.create_task(_Resumed(coro, first))
    await asyncio.sleep(0)
    inner.set_result(True)
    assert await task is True
