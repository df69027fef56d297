"""Controlled shutdown, the leaving broker's side: ask the controller to move leadership away.

The active controller may be this broker itself; otherwise the request goes over the wire
(ControlledShutdown v2, naming this broker with its epoch: the czxid of its registration)
and is retried while partitions remain led here.
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
                              attempts: int = 3, security: ClientSecurity | None = None) -> None:
    """Ask the controller to move leadership away before this broker exits."""
    for attempt in range(attempts):
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
        await asyncio.sleep(1)
    log.warning("broker.controlled_shutdown_incomplete")
