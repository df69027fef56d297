"""LeaderAndIsr, versions 0-2 (Kafka 0.10.1's inter-broker API, with KIP-380's broker epoch from v2).

The controller tells this broker which partitions it leads and which it follows. The request
is obeyed only if it is current (broker/controller/epochs.py): its broker epoch must be this
broker's registration czxid (else STALE_BROKER_EPOCH) and its controller epoch the one
ZooKeeper holds in `/controller_epoch` (else STALE_CONTROLLER_EPOCH); a refused request changes
nothing. A partition state with an older leader epoch than the one held is skipped, as Kafka does.
A topic name Kafka would refuse, or a negative partition, is answered
INVALID_TOPIC_EXCEPTION / UNKNOWN_TOPIC_OR_PARTITION and touches nothing: the name would
otherwise become a directory path (`../x`, `/abs/x`).

Departure: versions 0-1 carry no broker epoch. Kafka accepts them (epoch -1, from controllers
older than 2.2); here every controller is a minibroker that sends v2, so an old version can
only come from a client, and it could move leadership: it is refused with STALE_BROKER_EPOCH.
Authorization: ClusterAction on the cluster, else CLUSTER_AUTHORIZATION_FAILED (broker.apis.authorization).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.log.dirs import InvalidPartitionName
from protocol.errors import ErrorCode
from protocol.messages import leader_and_isr as messages
from protocol.topic import topic_partition_error

log = structlog.get_logger()

_YIELD_EVERY = 32
_LOG_EACH_UP_TO = 100


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    if refused := authorization.error(ctx):
        return {"error_code": refused, "partition_errors": []}
    services = ctx.services
    code = await services.controller.epochs.check(request["controller_epoch"], request.get("broker_epoch", -1))
    if code != ErrorCode.NONE:
        return {"error_code": code, "partition_errors": []}
    if "topic_states" in request:  # v2+ groups the states by topic; the loop reads the v0 shape
        request["ungrouped_partition_states"] = [{**ps, "topic_name": t["topic_name"]}
                                                 for t in request["topic_states"] for ps in t["partition_states"]]
    leaders = {b["broker_id"]: (b["host_name"], b["port"]) for b in request["live_leaders"]}
    states = request["ungrouped_partition_states"]
    started = time.monotonic()
    # Thousands of partitions: one event says how many (each partition's line cost ~25 µs of the
    # loop, a quarter of a second of a 10,000-partition restart); a few are logged one by one.
    batch = services.roles.batch(log_each=len(states) <= _LOG_EACH_UP_TO)
    made = await services.roles.prepare(states)  # new partitions' directories, made off the loop first
    errors = []
    try:
        for i, ps in enumerate(states):
            if i and not i % _YIELD_EVERY:
                # Thousands of partition states are seconds of work: let ZooKeeper pings, clients and
                # the controller's own events run in between, or the session expires mid-request.
                await asyncio.sleep(0)
            code = topic_partition_error(ps["topic_name"], ps["partition_index"])
            if code == ErrorCode.NONE:
                try:
                    code = await services.roles.apply_partition_state(ps, leaders, batch)
                except InvalidPartitionName:  # a legal name whose directory resolves elsewhere (a symlink)
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
            if code in (ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                log.warning("leader_and_isr.invalid_partition", peer=ctx.conn.peer, topic=ps["topic_name"][:255],
                            partition=ps["partition_index"], error=code.name)
            errors.append({"topic_name": ps["topic_name"], "partition_index": ps["partition_index"],
                           "error_code": code})
    finally:
        # Cut short (a shutdown cancels it, a state's failure raises), the directories made ahead
        # for the states not applied would outlive the request: empty partition directories.
        services.roles.discard_unused(made)
    # The leader-epoch checkpoints these states wrote are fsynced together, off the event loop,
    # before the controller hears back (one thread pool round, not four fsyncs per partition).
    applied = time.monotonic()
    await services.roles.sync_changes()
    if not batch.log_each:
        leading = sum(1 for ps, e in zip(states, errors, strict=True)
                      if e["error_code"] == ErrorCode.NONE and ps["leader"] == services.broker_id)
        log.info("leader_and_isr.applied", partitions=len(errors), leader=leading,
                 failed=sum(1 for e in errors if e["error_code"] != ErrorCode.NONE),
                 apply_s=round(applied - started, 3), sync_s=round(time.monotonic() - applied, 3))
    return {"error_code": 0, "partition_errors": errors}


register(messages, handle)
