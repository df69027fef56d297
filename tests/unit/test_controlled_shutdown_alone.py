"""broker.controlled_shutdown: a broker that is the controller and the only live broker asks
nothing (there is nowhere to move leadership), so its shutdown never waits behind the
controller's event queue; with another live broker the request goes through the controller."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker import controlled_shutdown as controlled_shutdown_module
from broker.controlled_shutdown import alone, controlled_shutdown
from broker.controller.controller import Controller
from broker.metadata import MetadataCache
from broker.zk import layout as L


def _info(broker_id: int) -> L.BrokerInfo:
    return L.BrokerInfo(broker_id, "127.0.0.1", 9092 + broker_id)


def _controller_alone_with(live: list[int]) -> tuple[Controller, MetadataCache]:
    controller = Controller(zk=object(), broker_id=0)  # type: ignore[arg-type]  # never started: its event queue never runs
    controller.ctx.active = True
    controller.ctx.live = {b: _info(b) for b in live}
    controller.epochs.registered(42)  # this broker's epoch, so the controller would not refuse it
    metadata = MetadataCache()
    metadata.controller_id = 0
    metadata.brokers = {b: _info(b) for b in live}
    return controller, metadata


async def test_the_only_live_broker_asks_nothing_of_a_stalled_controller() -> None:
    controller, metadata = _controller_alone_with([0])
    assert alone(0, metadata, controller)
    async with asyncio.timeout(2):
        await controlled_shutdown(0, metadata, controller)
    assert controller.ctx.shutting_down == set()  # no request reached the controller


async def test_with_another_live_broker_the_request_waits_for_the_controller() -> None:
    controller, metadata = _controller_alone_with([0, 1])
    assert not alone(0, metadata, controller)
    asked = asyncio.create_task(controlled_shutdown(0, metadata, controller))
    async with asyncio.timeout(2):
        while controller.ctx._events.empty():  # the request is queued behind the controller's events
            await asyncio.sleep(0.01)
    assert not asked.done()  # and waits for the answer
    asked.cancel()


def test_not_alone_while_this_broker_knows_of_another_or_is_not_the_controller() -> None:
    controller, metadata = _controller_alone_with([0])
    metadata.brokers[1] = _info(1)  # UpdateMetadata named a broker the controller has not read yet
    assert not alone(0, metadata, controller)
    controller, metadata = _controller_alone_with([0])
    controller.ctx.active = False
    assert not alone(0, metadata, controller)


async def test_retries_as_kafka_at_most_max_retries_requests_backoff_apart(monkeypatch) -> None:  # noqa: ANN001
    """controlled.shutdown.max.retries requests in all while partitions remain led here, each
    controlled.shutdown.retry.backoff.ms after the one before; none after the last; stops at the
    first answer that leaves nothing here."""
    controller, metadata = _controller_alone_with([0, 1])
    steps: list[object] = []  # ("ask",) per request, the seconds of each wait between
    answers: list[list[tuple[str, int]]] = []

    async def answer(broker_id: int, epoch: int) -> list[tuple[str, int]]:
        steps.append("ask")
        return answers.pop(0)

    async def sleep(seconds: float) -> None:
        steps.append(seconds)
    monkeypatch.setattr(controller, "controlled_shutdown", answer)
    monkeypatch.setattr(controlled_shutdown_module, "asyncio", SimpleNamespace(sleep=sleep))

    answers[:] = [[("t", 0)]] * 4
    await controlled_shutdown(0, metadata, controller, max_retries=4, retry_backoff_ms=250)
    assert steps == ["ask", 0.25, "ask", 0.25, "ask", 0.25, "ask"] and answers == []

    steps.clear()
    answers[:] = [[("t", 0)], [], [("t", 0)]]
    await controlled_shutdown(0, metadata, controller, max_retries=3, retry_backoff_ms=5000)
    assert steps == ["ask", 5.0, "ask"] and answers == [[("t", 0)]]  # done at the second

    steps.clear()
    await controlled_shutdown(0, metadata, controller, max_retries=0, retry_backoff_ms=1)
    assert steps == []  # Kafka's loop runs while retries remain: none asked
