"""ListOffsets, versions 0-1.

Timestamps -2 (earliest) and -1 (latest) are served. Consumers get the high watermark
as "latest", followers (replica_id >= 0) the log end. Departure from Kafka: there is no
time index yet, so a lookup by a real timestamp answers offset -1 (v1) or an empty list
(v0), Kafka's answer when no message is at or after that time. A partition whose log
directory failed answers KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import list_offsets as messages

LATEST = -1
EARLIEST = -2


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    consumer = request["replica_id"] < 0
    topics = []
    for topic in request["topics"]:
        name = topic["name"]
        parts = []
        for rp in topic["partitions"]:
            idx = rp["partition_index"]
            out: dict[str, Any] = {"partition_index": idx, "error_code": 0, "old_style_offsets": [],
                                   "timestamp": -1, "offset": -1}
            parts.append(out)
            part = services.replicas.get(name, idx)
            if services.replicas.is_offline(name, idx):
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if part is None or part.leader != services.broker_id:
                known = services.metadata.partition(name, idx) is not None
                out["error_code"] = ErrorCode.NOT_LEADER_FOR_PARTITION if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            ts = rp["timestamp"]
            if ts == LATEST:
                offset = part.high_watermark if consumer else part.log_end_offset
            elif ts == EARLIEST:
                offset = part.log.log_start_offset
            else:
                offset = -1
            if ctx.api_version == 0:
                wanted = rp.get("max_num_offsets", 1)
                out["old_style_offsets"] = [offset] if offset >= 0 and wanted > 0 else []
            else:
                out["offset"] = offset
        topics.append({"name": name, "partitions": parts})
    return {"topics": topics}


register(messages, handle)
