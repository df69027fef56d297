"""Produce, versions 0-9 (Kafka 2.8's table).

v3 adds the transactional id, v5 the log start offset in the response, v8 record_errors and
error_message, v9 is flexible. Record sets are validated as Kafka 2.8's LogValidator does
(protocol.records.validator, which lists the checks and their error codes) and stored as
RecordBatch v2: a v2 batch as sent, with the leader's offsets and epoch written in, a magic 0/1
message set (Produce v0-v2 from old clients) up-converted. Every error is that partition's
only: nothing of it is appended, and the other partitions of the request go on. Validation
reads the topic's `max.message.bytes` (else the broker's `message.max.bytes`),
`message.timestamp.type`, `message.timestamp.difference.max.ms` and `compression.type` (Kafka's
defaults CreateTime, Long.MaxValue and producer; there are no broker-level keys for these).

Served versions: the data-path table is one Kafka release's (client-compat rule 3), so Produce
3-9 (message format v2) is listed only together with Fetch 4+ and InitProducerId, as Kafka 2.8
lists Produce 3+ only when it also serves Fetch 4+ (both need magic 2). librdkafka writes
RecordBatch v2 only when both Produce 3 and Fetch 4 are listed, and otherwise sends magic-1
message sets inside whatever Produce version is listed, which Produce 3+ must refuse
(INVALID_RECORD); kafka-python 3 infers a broker >= 0.11 from Produce 3 and then needs
InitProducerId. Until those are declared, Produce 0-2 is served (aiokafka's v2 batches inside
Produce v2 are stored as sent all the same).

Departures: no transactions, so a transactional batch gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED
(no transactional id in the request, Kafka 2.8's answer, which Kafka gives the whole request)
or INVALID_TXN_STATE (with one) for its partition, at once.

Internal topics (`__consumer_offsets`) are refused to ordinary produce with
INVALID_TOPIC_EXCEPTION for each of their partitions, as Kafka 2.8's ReplicaManager does; as
there, a client with Kafka's admin client id `__admin_client` may append to them.

acks=0 gets no response; acks=-1 waits for the high watermark (the whole ISR) up to
timeout_ms, then REQUEST_TIMED_OUT. NOT_ENOUGH_REPLICAS when the ISR is smaller than
min.insync.replicas (topic config, else the broker's). KAFKA_STORAGE_ERROR for a partition
whose log directory failed (the append that failed left nothing behind).

KIP-13: the records are appended first, then the request's size is recorded against the client
id's produce quota. Up to v5 the response is held for the throttle time it earns (v0 without
the field); from v6 (KIP-219) it is sent at once with throttle_time_ms and the connection is
not read for that time, the client holding back by itself. acks=0 has no response to hold, so
the connection is not read for the throttle time instead; an acks=0 client cannot bypass its
quota.

Size: a batch or top-level message larger than the limit is MESSAGE_TOO_LARGE before anything
is decompressed, and a compressed one may inflate only to a bound tied to that limit
(protocol.records.compression), so a small gzip bomb is refused without being inflated in full.
Authorization (broker.apis.authorization): Write on each topic, else TOPIC_AUTHORIZATION_FAILED
for its partitions; a request with a transactional id needs Write on it, one with idempotent
batches IdempotentWrite on the cluster (Kafka 2.8), else every partition gets
TRANSACTIONAL_ID_ / CLUSTER_AUTHORIZATION_FAILED. Checked before anything else of a partition.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.apis import authorization
from broker.apis.context import BrokerServices
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.metadata import topic_name_error
from broker.zk.config_entities import quota_user
from broker.zk.topic_configs import topic_int
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fast import decode_produce_request, encode_produce_response
from protocol.layouts import MAGIC_OFFSET, PRODUCER_ID, RECORD_BATCH_HEADER_SIZE, RECORD_BATCH_PRODUCER_ID
from protocol.messages import MODULES
from protocol.messages import fetch as fetch_messages
from protocol.messages import produce as messages
from protocol.records.record_batch import CREATE_TIME, LOG_APPEND_TIME
from protocol.records.validator import NO_TIMESTAMP_LIMIT, ValidationConfig
from protocol.topic import is_internal

# Kafka's AdminUtils.AdminClientId: the one client id whose produce may append to internal topics.
ADMIN_CLIENT_ID = "__admin_client"

# Produce v2's table (Kafka 0.10.1's data path) when the rest of Kafka 2.8's is not there yet.
MESSAGE_FORMAT_V1_VERSIONS = (0, 2)
RECORD_BATCH_FETCH_FROM = 4


def served_versions() -> tuple[int, int]:
    """Produce 0-9 when Fetch 4+ and InitProducerId are declared, else 0-2 (module docstring)."""
    init_producer_id = getattr(ApiKey, "INIT_PRODUCER_ID", None)
    if fetch_messages.VERSIONS[1] >= RECORD_BATCH_FETCH_FROM and init_producer_id in MODULES:
        versions: tuple[int, int] = messages.VERSIONS
        return versions
    return MESSAGE_FORMAT_V1_VERSIONS


# From v6 the client throttles itself (KIP-219; Kafka's ProduceResponse.shouldClientThrottle).
CLIENT_THROTTLES_FROM = 6


# Each topic's ValidationConfig with what it was made from (its config dict, which a change
# replaces, and the broker's message.max.bytes): made again only when either changed.
_VALIDATION: dict[str, tuple[dict[str, str], int, ValidationConfig]] = {}
_VALIDATION_MAX = 10_000  # topics remembered (deleted ones linger until it is full, then all go)


def _cached_validation_config(services: BrokerServices, topic: str) -> ValidationConfig | None:
    """The topic's validation settings when its configs are cached (once this broker leads one of
    its partitions, kept current by config change notifications): no ZooKeeper, no await."""
    cfg = services.roles.topic_configs.cached(topic)
    if cfg is None:
        return None
    max_bytes = services.config.message_max_bytes
    hit = _VALIDATION.get(topic)
    if hit is not None and hit[0] is cfg and hit[1] == max_bytes:
        return hit[2]
    config = _make_validation_config(topic, cfg, max_bytes)
    if len(_VALIDATION) >= _VALIDATION_MAX:
        _VALIDATION.clear()
    _VALIDATION[topic] = (cfg, max_bytes, config)
    return config


async def _validation_config(ctx: RequestContext, topic: str) -> ValidationConfig:
    """The topic's validation settings, each with Kafka's fallback."""
    cached = _cached_validation_config(ctx.services, topic)
    if cached is not None:
        return cached
    # Read from ZooKeeper, whose calls are bound to the task they run in (asyncio.timeout):
    # not from the connection's reading task (broker.network.Connection.start, eager).
    await ctx.conn.leave_reader()
    services = ctx.services
    return _make_validation_config(topic, await services.roles.topic_configs.get(topic),
                                   services.config.message_max_bytes)


def _make_validation_config(topic: str, cfg: dict[str, str], message_max_bytes: int) -> ValidationConfig:
    ts_type = LOG_APPEND_TIME if cfg.get("message.timestamp.type") == "LogAppendTime" else CREATE_TIME
    return ValidationConfig(
        max_message_bytes=topic_int(topic, cfg, "max.message.bytes", message_max_bytes),
        timestamp_type=ts_type,
        timestamp_difference_max_ms=topic_int(topic, cfg, "message.timestamp.difference.max.ms",
                                              NO_TIMESTAMP_LIMIT),
        compression_type=cfg.get("compression.type", "producer"),
        compacted="compact" in cfg.get("cleanup.policy", "delete").replace(" ", "").split(","))


def decode(buf: memoryview, version: int) -> dict[str, Any]:
    return decode_produce_request(buf, version)


def _entry(index: int) -> dict[str, Any]:
    return {"index": index, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
            "record_errors": [], "error_message": None}


def _idempotent(request: dict[str, Any]) -> bool:
    """ProduceRequest.hasIdempotentRecords, from each partition's first batch head (a v2 batch
    with a producer id); no record is looked at."""
    for topic in request["topic_data"]:
        for pd in topic["partition_data"]:
            records = pd["records"]
            if records is not None and len(records) >= RECORD_BATCH_HEADER_SIZE and records[MAGIC_OFFSET] == 2 \
                    and PRODUCER_ID.unpack_from(records, RECORD_BATCH_PRODUCER_ID)[0] >= 0:
                return True
    return False


def _request_refusal(ctx: RequestContext, request: dict[str, Any], transactional_id: str | None) -> ErrorCode:
    """KafkaApis.handleProduceRequest's whole-request checks: Write on the transactional id, else
    IdempotentWrite on the cluster for idempotent records (authorization.RULES[PRODUCE])."""
    if not ctx.services.authorizer.enabled:
        return ErrorCode.NONE
    if transactional_id is not None:
        return authorization.error(ctx, transactional_id, which=2)
    if _idempotent(request):
        return authorization.error(ctx, which=1)
    return ErrorCode.NONE


async def handle(ctx: RequestContext, request: dict[str, Any]) -> list[bytes] | None:
    services = ctx.services
    rm = services.replicas
    acks = request["acks"]
    version = ctx.api_version
    transactional_id = request.get("transactional_id")
    results: dict[str, list[dict[str, Any]]] = {}
    waits: list[tuple[dict[str, Any], Any, int]] = []
    submitted: list[tuple[dict[str, Any], Any, asyncio.Future[Any]]] = []
    request_refused = _request_refusal(ctx, request, transactional_id)
    for topic in request["topic_data"]:
        name = topic["name"]
        out = results.setdefault(name, [])
        refused = request_refused or authorization.error(ctx, name)
        for pd in topic["partition_data"]:
            idx = pd["index"]
            entry = _entry(idx)
            out.append(entry)
            if refused:  # Kafka checks authorization before anything else of the partition
                entry["error_code"] = refused
                continue
            if acks not in (0, 1, -1):
                entry["error_code"] = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            if is_internal(name) and ctx.client_id != ADMIN_CLIENT_ID:
                # Kafka's ReplicaManager.appendToLocalLog: "Cannot append to internal topic".
                entry["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
                entry["error_message"] = f"Cannot append to internal topic {name}"
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
                entry["error_code"] = ErrorCode.INVALID_RECORD if version >= 3 else ErrorCode.CORRUPT_MESSAGE
                continue
            config = _cached_validation_config(services, name) or await _validation_config(ctx, name)
            submitted.append((entry, part, rm.submit_append_now(part, records, acks, config, version,
                                                                  transactional_id)))
    if submitted:
        # Every append of the request has its offsets; their writes are queued (broker.log.writer).
        # The connection's next request may start now (a non-Produce one waits for these writes,
        # broker.network.Connection.next_may_start); the request's bytes stay counted in
        # queued.max.request.bytes until its writes are done.
        futures = [fut for _, _, fut in submitted]
        if not all(fut.done() for fut in futures):
            ctx.conn.appends_submitted(futures)
            await asyncio.wait(futures)  # never cancels them: a write queued is answered in any case
        # else every append was written inline (small, nothing in flight: ReplicaManager.submit_append):
        # answered as a synchronous append was, without marking the request processed early
        # (which would wake the reading task before the answer and send it through the
        # connection's sending task) and with nothing for the next request to wait for.
        for entry, part, fut in submitted:
            result = fut.result()
            entry["error_code"] = result.error_code
            entry["base_offset"] = result.base_offset
            entry["log_append_time_ms"] = result.log_append_time
            entry["log_start_offset"] = result.log_start_offset
            if result.record_errors:
                entry["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                          for i, m in result.record_errors]
            if result.error_code != ErrorCode.NONE:
                entry["error_message"] = result.error_message
            if result.error_code == ErrorCode.NONE and acks == -1:
                waits.append((entry, part, result.last_offset + 1))
    if waits:
        # Appended (written): from here the request only waits, and its bytes no longer count against
        # queued.max.request.bytes (the followers' fetches must still be read meanwhile).
        ctx.conn.request_processed()
        timeout = max(request["timeout_ms"], 0) / 1000
        if len(waits) == 1:  # the common case, awaited in this task: no task and two loop turns fewer
            _, part, target = waits[0]
            codes = [await rm.wait_for_hw(part, target, timeout)]
        else:
            codes = await asyncio.gather(*(rm.wait_for_hw(part, target, timeout) for _, part, target in waits))
        for (entry, _, _), code in zip(waits, codes, strict=True):
            entry["error_code"] = code
    throttle_ms = services.produce_quotas.record(ctx.client_id, ctx.size, services.now_ms(),
                                                 user=quota_user(ctx.principal))
    if acks == 0:
        if throttle_ms:
            ctx.conn.mute_for(throttle_ms / 1000)
        return None
    if version >= CLIENT_THROTTLES_FROM:
        if throttle_ms:
            ctx.conn.mute_for(throttle_ms / 1000)
    else:
        ctx.hold_ms = throttle_ms
    # Encoded here with the data path's struct codec (protocol.fast), not the schema codec.
    return [encode_produce_response(version, {"responses": [{"name": n, "partition_responses": ps}
                                                            for n, ps in results.items()],
                                              "throttle_time_ms": throttle_ms})]


register(messages, handle, decode, versions=served_versions())
