"""broker.controller.Controller.controlled_shutdown: a request without a broker epoch (versions 0-1)
is refused at once, without waiting behind the controller's event queue.

The fuzz's long run left mutated ControlledShutdown v0/v1 requests unanswered for seconds: they
were queued behind whatever the controller was doing, though their answer never depended on it.
"""

from __future__ import annotations

import asyncio

from broker.controller.controller import Controller


async def test_a_request_without_an_epoch_is_refused_while_the_event_queue_is_stalled() -> None:
    controller = Controller(zk=object(), broker_id=0)  # type: ignore[arg-type]  # never started: its event queue never runs
    async with asyncio.timeout(2):
        assert await controller.controlled_shutdown(1, -1) is None
    assert controller.ctx.shutting_down == set()
