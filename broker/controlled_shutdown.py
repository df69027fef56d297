"""Controlled shutdown, the leaving broker's side: ask the controller to move leadership away.

The active controller may be this broker itself; otherwise the request goes over the wire
(ControlledShutdown v2, naming this broker with its epoch: the czxid of its registration).
As Kafka 2.8's KafkaServer.controlledShutdown: at most `controlled.shutdown.max.retries` requests
in all (3), `controlled.shutdown.retry.backoff.ms` (5000) apart, while one fails or leaves
partitions led here; then the broker shuts down anyway. Departures: no wait after the last
request (Kafka sleeps the backoff once more before giving up), and no request at all while no
controller is known (Kafka spends its attempts waiting for one).

Departure: when this broker is the controller and the only live broker it and its controller
know of, there is nowhere to move leadership, so nothing is asked: Kafka's controller would
queue the request behind its event queue (seconds after a failover or a topic creation of
10,000 partitions) and answer, for a replicated topic, with partitions that can only remain, for
the broker to retry (controlled.shutdown.max.retries 3, 5 s apart) in vain.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from broker.controller.controller import Controller
from broker.metadata import MetadataCache
from fetcher.connection import KafkaConnection
from fetcher.security import ClientSecurity
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

log = structlog.get_logger()


async def controlled_shutdown(broker_id: int, metadata: MetadataCache, controller: Controller,
                              max_retries: int = 3, retry_backoff_ms: int = 5000,
                              security: ClientSecurity | None = None) -> None:
    """Ask the controller to move leadership away before this broker exits (module docstring)."""
    if alone(broker_id, metadata, controller):
        log.info("broker.controlled_shutdown_done", alone=True)
        return
    for attempt in range(max_retries):
        if attempt:
            await asyncio.sleep(retry_backoff_ms / 1000)
        cid = metadata.controller_id
        epoch = controller.epochs.broker_epoch
        asked = time.monotonic()
        log.info("broker.controlled_shutdown_request", attempt=attempt, controller=cid)
        if cid == broker_id and controller.active:
            remaining = await controller.controlled_shutdown(broker_id, epoch)
            log.info("broker.controlled_shutdown_answer", attempt=attempt, s=round(time.monotonic() - asked, 3),
                     remaining=None if remaining is None else len(remaining))
            if remaining == []:
                log.info("broker.controlled_shutdown_done")
                return
        else:
            info = metadata.brokers.get(cid)
            if info is None:
                return
            try:
                async with await KafkaConnection.open(info.host, info.port, f"broker-{broker_id}", 5,
                                                  security=security) as c:
                    resp = await c.request(ApiKey.CONTROLLED_SHUTDOWN, 2,
                                           {"broker_id": broker_id, "broker_epoch": epoch}, 30)
                log.info("broker.controlled_shutdown_answer", attempt=attempt, s=round(time.monotonic() - asked, 3),
                         remaining=len(resp["remaining_partitions"] or ()),
                         error=ErrorCode.name_of(resp["error_code"]))
                if resp["error_code"] == 0 and not resp["remaining_partitions"]:
                    log.info("broker.controlled_shutdown_done")
                    return
                if resp["error_code"] != 0:
                    log.info("broker.controlled_shutdown_retry", attempt=attempt,
                             error=ErrorCode.name_of(resp["error_code"]))
            except Exception as e:
                log.info("broker.controlled_shutdown_retry", attempt=attempt, error=type(e).__name__)
    log.warning("broker.controlled_shutdown_incomplete", attempts=max_retries)


def alone(broker_id: int, metadata: MetadataCache, controller: Controller) -> bool:
    """This broker is the active controller and no other broker is live, as the controller knows
    it (its registrations) and as this broker does (UpdateMetadata): no partition can move."""
    return (controller.active and set(controller.ctx.live) == {broker_id}
            and set(metadata.brokers) <= {broker_id})
