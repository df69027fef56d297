"""LeaderAndIsr, version 0 (Kafka 0.10.1's inter-broker API).

The controller tells this broker which partitions it leads and which it follows. A
request from an older controller epoch is refused with STALE_CONTROLLER_EPOCH, and a
partition state with an older leader epoch than the one held is skipped, as Kafka does.
A topic name Kafka would refuse, or a negative partition, is answered
INVALID_TOPIC_EXCEPTION / UNKNOWN_TOPIC_OR_PARTITION and touches nothing: the name would
otherwise become a directory path (`../x`, `/abs/x`).
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.log.dirs import InvalidPartitionName
from protocol.errors import ErrorCode
from protocol.messages import leader_and_isr as messages
from protocol.topic import topic_partition_error

log = structlog.get_logger()


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    if request["controller_epoch"] < services.replicas.controller_epoch:
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH, "partition_errors": []}
    services.replicas.controller_epoch = request["controller_epoch"]
    leaders = {b["broker_id"]: (b["host_name"], b["port"]) for b in request["live_leaders"]}
    errors = []
    for ps in request["ungrouped_partition_states"]:
        code = topic_partition_error(ps["topic_name"], ps["partition_index"])
        if code == ErrorCode.NONE:
            try:
                code = await services.roles.apply_partition_state(ps, leaders)
            except InvalidPartitionName:  # a legal name whose directory resolves elsewhere (a symlink)
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
        if code in (ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            log.warning("leader_and_isr.invalid_partition", peer=ctx.conn.peer, topic=ps["topic_name"][:255],
                        partition=ps["partition_index"], error=code.name)
        errors.append({"topic_name": ps["topic_name"], "partition_index": ps["partition_index"], "error_code": code})
    return {"error_code": 0, "partition_errors": errors}


register(messages, handle)
