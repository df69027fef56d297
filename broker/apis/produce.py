"""Produce, versions 0-2 (Kafka 0.10.1's table).

Record sets arrive as magic 0/1 message sets, or as RecordBatch v2 from aiokafka's
producer even inside Produce v2; protocol.records validates them, assigns offsets and
stores magic 1. A bad CRC answers CORRUPT_MESSAGE and appends nothing for that
partition. acks=0 gets no response; acks=-1 waits for the high watermark (the whole
ISR) up to timeout_ms, then REQUEST_TIMED_OUT. NOT_ENOUGH_REPLICAS when the ISR is
smaller than min.insync.replicas (topic config, else the broker's). KAFKA_STORAGE_ERROR for a
partition whose log directory failed (the append that failed left nothing behind).

KIP-13, as in Kafka 0.10.1: the records are appended first, then the request's size is
recorded against the client id's produce quota, and the response is held for the throttle
time it earns and carries it in throttle_time_ms (v1+; v0 is held without the field). The
held response is a few offsets, never the records. acks=0 has no response to hold, so the
connection is not read for the throttle time instead; an acks=0 client cannot bypass its
quota.

Size: each batch or top-level message larger than the topic's `max.message.bytes` (else the
broker's `message.max.bytes`) is MESSAGE_TOO_LARGE before anything is decompressed, and a
compressed one may inflate only to a bound tied to that limit (protocol.records.compression),
so a small gzip bomb is refused without being inflated in full.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.apis.context import BrokerServices
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.metadata import topic_name_error
from broker.zk.topic_configs import topic_int
from protocol.errors import ErrorCode
from protocol.fast import decode_produce_request
from protocol.messages import produce as messages


async def _max_message_bytes(services: BrokerServices, topic: str) -> int:
    """The topic's `max.message.bytes`, else the broker's `message.max.bytes` (Kafka's fallback).

    The topic's configs are cached once this broker leads one of its partitions, and kept
    current by config change notifications, so this does not reach ZooKeeper per request.
    """
    cfg = await services.roles.topic_configs.get(topic)
    return topic_int(topic, cfg, "max.message.bytes", services.config.message_max_bytes)


def decode(buf: memoryview, version: int) -> dict[str, Any]:
    return decode_produce_request(buf, version)


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any] | None:
    services = ctx.services
    rm = services.replicas
    acks = request["acks"]
    results: dict[str, list[dict[str, Any]]] = {}
    waits: list[tuple[dict[str, Any], Any, int]] = []
    for topic in request["topic_data"]:
        name = topic["name"]
        out = results.setdefault(name, [])
        for pd in topic["partition_data"]:
            idx = pd["index"]
            entry: dict[str, Any] = {"index": idx, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1}
            out.append(entry)
            if acks not in (0, 1, -1):
                entry["error_code"] = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            part = rm.get(name, idx)
            if rm.is_offline(name, idx):
                entry["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if part is None or part.leader != services.broker_id:
                if topic_name_error(name):
                    entry["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
                elif services.metadata.partition(name, idx) is not None:
                    entry["error_code"] = ErrorCode.NOT_LEADER_FOR_PARTITION
                else:
                    entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            records = pd["records"]
            if records is None or len(records) == 0:
                entry["error_code"] = ErrorCode.CORRUPT_MESSAGE
                continue
            limit = await _max_message_bytes(services, name)
            code, base, info = rm.append(part, records, acks, limit)
            entry["error_code"] = code
            entry["base_offset"] = base
            if code == ErrorCode.NONE and acks == -1 and info is not None:
                waits.append((entry, part, info.last_offset + 1))
    if waits:
        # Appended: from here the request only waits, and its bytes no longer count against
        # queued.max.request.bytes (the followers' fetches must still be read meanwhile).
        ctx.conn.request_processed()
        timeout = max(request["timeout_ms"], 0) / 1000
        codes = await asyncio.gather(*(rm.wait_for_hw(part, target, timeout) for _, part, target in waits))
        for (entry, _, _), code in zip(waits, codes, strict=True):
            entry["error_code"] = code
    throttle_ms = services.produce_quotas.record(ctx.client_id, ctx.size, services.now_ms())
    if acks == 0:
        if throttle_ms:
            ctx.conn.mute_for(throttle_ms / 1000)
        return None
    ctx.hold_ms = throttle_ms
    return {"responses": [{"name": n, "partition_responses": ps} for n, ps in results.items()],
            "throttle_time_ms": throttle_ms}


register(messages, handle, decode)
