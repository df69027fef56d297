"""InitProducerId, versions 0-4 (flexible from 2): producer ids for idempotent producers.

An idempotent producer (null transactional_id) gets a new producer id with epoch 0, from the
blocks this broker claims in `/latest_producer_id_block` (broker.zk.producer_ids). Any broker
answers, as in Kafka 2.8. A v3+ request naming its current producer id and epoch (KIP-360's
epoch bump after an UNKNOWN_PRODUCER_ID or a sequence problem) gets a new id with epoch 0 too,
which is what Kafka 2.8 does for a producer without a transactional id; a request naming only
one of the two is INVALID_REQUEST.

Departure from Kafka: transactions are not served. A non-null transactional_id is answered at
once with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which every client treats as fatal and
reports by name, instead of being routed to a transaction coordinator. An empty one is
INVALID_REQUEST, as in Kafka.
Authorization: a transactional id needs Write on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), an
idempotent producer IdempotentWrite on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.zk.client import ZkError
from protocol.errors import ErrorCode
from protocol.messages import init_producer_id as messages

log = structlog.get_logger()
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def _answer(code: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    txn_id = request["transactional_id"]
    if txn_id is not None:
        if txn_id == "":
            return _answer(ErrorCode.INVALID_REQUEST)
        if refused := authorization.error(ctx, txn_id, which=1):
            return _answer(refused)
        log.info("init_producer_id.transactions_not_supported", broker_id=ctx.services.broker_id,
                 client_id=ctx.client_id)
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if refused := authorization.error(ctx):
        return _answer(refused)
    pid, epoch = request.get("producer_id", NO_PRODUCER_ID), request.get("producer_epoch", NO_PRODUCER_EPOCH)
    if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        return _answer(ErrorCode.INVALID_REQUEST)
    try:
        new_pid = await ctx.services.producer_ids.generate()
    except ZkError as e:
        # ZooKeeper unreachable: a retriable error, the client asks again.
        log.warning("init_producer_id.no_block", broker_id=ctx.services.broker_id, error=str(e))
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _answer(ErrorCode.NONE, new_pid, 0)


register(messages, handle)
