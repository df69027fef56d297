"""Fetch, versions 0-12 (Kafka 2.8's table), with KIP-74's response-wide max_bytes and KIP-73's
leader throttle.

Versions: v4 isolation_level (there are no transactions: the last stable offset is the high
watermark, and aborted_transactions is null for READ_UNCOMMITTED and empty for READ_COMMITTED,
as Kafka answers); v5 log_start_offset; v7 fetch sessions are declined, as a broker whose
session cache has no slots declines them: a full fetch (session epoch 0 or -1) is answered in
full with session_id 0, and an incremental one (any other epoch) with the top-level error
FETCH_SESSION_ID_NOT_FOUND and no partitions, since no session was ever handed out; v9
current_leader_epoch is checked against the partition's leader epoch when this broker knows
it (older: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH, -1: not checked); v11
rack_id is ignored and preferred_read_replica is -1; v12 is flexible, its tagged fields
(diverging_epoch, current_leader, snapshot_id) stay unset. A storage error is answered as
NOT_LEADER_FOR_PARTITION to Fetch v0-5, whose clients do not know KAFKA_STORAGE_ERROR
(Kafka's maybeDownConvertStorageError).

Served versions: the data-path table is one Kafka release's (client-compat rule 3): Fetch 4-12
is listed only together with Produce 3-9 (broker.apis.produce.served_versions, which waits for
InitProducerId), as Kafka 2.8 ties both to message format v2; until then Fetch 0-3 is served
(kafka-python infers a 2.x broker from Fetch 4+ and then needs InitProducerId).

Message formats: Fetch v4+ gets the log's bytes as stored (RecordBatch v2, or magic 1 from
older logs). A consumer fetching with v0-3 gets them down-converted when they hold anything
newer than it reads (v0-1: magic 0, v2-3: magic 1; protocol.records.down_convert), and the
size rules below apply to the converted bytes. Followers (replica_id >= 0) always get the
stored bytes: replication between minibrokers stays on Fetch v3 and carries RecordBatch v2 as
is (a departure: Kafka would down-convert a v3 follower fetch too). A ZStandard batch cannot be
down-converted: UNSUPPORTED_COMPRESSION_TYPE for that partition; and, as Kafka does, a consumer
below Fetch v10 gets UNSUPPORTED_COMPRESSION_TYPE for every partition of a topic whose
compression.type is zstd (followers are exempt: they replicate the stored bytes).

For each partition in request order the log is read up to min(partition max_bytes, what
is left of the response limit). Until a partition has returned data, the first message or
batch is returned whole even if larger than both limits (v3+); after that, a v3+ partition
whose first message does not fit gets empty records and no error, while v0-v2 return a
partial message as Kafka 0.10 did. Consumers (replica_id < 0) read up to the high watermark;
followers up to the log end. replica_id -2 (debug consumer) may read from a non-leader.
The response waits up to max_wait_ms for min_bytes, woken only by what can change its answer
for the partitions it asks for: a follower's by appends, a consumer's by high-watermark moves
(either by a change of role, epoch or ISR); while it waits, the connection's next requests are
read. Record bytes travel as slices of the segment files: on a plain TCP connection a record
set of SENDFILE_FROM bytes or more is handed to the connection as the file range itself
(FileSlice) and sent with sendfile (broker.network), as Kafka's FileRecords are; otherwise it is
read here with one pread. A partition whose log directory failed (before or during that read)
gets KAFKA_STORAGE_ERROR (NOT_LEADER_FOR_PARTITION below v6, as above); a range that cannot be
read once its response is going out closes the connection, as Kafka's FileRecords.writeTo
failing does.

Follower fetches (replica_id >= 0) first record the follower's fetch offset (ISR
bookkeeping), and only after checking it, in Kafka 2.8's order
(ReplicaManager.readFromLocalLog, then updateFollowerFetchState): a fetch offset below
the leader's log start or beyond its log end is OFFSET_OUT_OF_RANGE and records nothing
(a follower's fetch offset is its log end, which counts toward the high watermark). A
replica id that is not an assigned follower of the partition (another broker, the leader
itself) records nothing and gets empty records with no error and the current high
watermark: Kafka 2.8 has no error code for it, and its path (updateFollowerFetchState
returning false, then withEmptyFetchInfo) yields exactly that.

A partition listed in `leader.replication.throttled.replicas` whose follower is out of
the ISR is answered with empty records and the normal high watermark while the leader
quota is exceeded (KAFKA-4313 keeps in-sync replicas unthrottled); it costs nothing of
the response budget and counts nothing toward min_bytes. While the quota is not
exceeded, such partitions together get at most the quota's remaining allowance (a
departure from 0.10.1, which let one response overshoot by its whole size), cut to whole
batches (Kafka's read may end inside one; under a capped grant that tail was sent again in
the next), and wait while that is less than a minimum grant, so that leader and follower
do not trade crumbs. The bytes of every throttled partition in the response, in-sync ones included,
are recorded when the response is sent.

KIP-13 (consumers only; follower fetches are exempt): a client id over its fetch quota is
delayed before anything is read, by round((O - T) / T * W), and the response carries
that delay as throttle_time_ms (v1+). The bytes sent are recorded afterwards. Delaying
before the read, rather than holding a finished response as 0.10.1 did, means a throttled
consumer holds no log data while it waits, and gets the freshest data when it resumes.
Authorization (broker.apis.authorization): a consumer needs Read on each topic, a follower
ClusterAction on the cluster; refused partitions are TOPIC_AUTHORIZATION_FAILED and do not end a
long poll.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, cast

from broker.apis import authorization
from broker.apis.produce import served_versions as produce_versions
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.log import KafkaStorageError, OffsetOutOfRange
from broker.zk.config_entities import quota_user
from protocol.errors import ErrorCode
from protocol.fast import FetchResponseRow, decode_fetch_request_rows, encode_fetch_response_rows
from protocol.messages import fetch as messages
from protocol.records.down_convert import down_convert, fit, needs_conversion, target_magic
from protocol.records.errors import RecordsError

if TYPE_CHECKING:
    from broker.replication.replica_manager import Partition

# Fetch's table before message format v2 (Kafka 0.10.1's data path), and the first Produce
# version of Kafka 2.8's (message format v2) that Fetch 4-12 comes with.
MESSAGE_FORMAT_V1_VERSIONS = (0, 3)
RECORD_BATCH_PRODUCE_FROM = 3
ZSTD_FETCH_FROM = 10  # KIP-110: older consumers cannot read zstd
DEBUG_REPLICA_ID = -2
THROTTLE_RECHECK_S = 0.05
READ_COMMITTED = 1
# Record sets from this size on are handed to the connection as file ranges (sendfile); below
# it a pread joined into the response's head costs less than a system call of their own.
SENDFILE_FROM = 32 << 10
# Session epochs of a full fetch request (Kafka's FetchMetadata INITIAL_EPOCH and FINAL_EPOCH).
FULL_FETCH_EPOCHS = (0, -1)


def decode(buf: memoryview, version: int) -> dict[str, Any]:
    """The request with each partition a row: (partition, current leader epoch, fetch offset,
    partition max bytes) (protocol.fast.decode_fetch_request_rows)."""
    return decode_fetch_request_rows(buf, version)


def _refused_topics(ctx: RequestContext, request: dict[str, Any]) -> dict[str, int]:
    """KafkaApis.handleFetchRequest's checks, once per request: a follower needs ClusterAction
    (else every partition is TOPIC_AUTHORIZATION_FAILED), a consumer Read on each topic."""
    if not ctx.services.authorizer.enabled:
        return {}
    names = {topic["topic"] for topic in request["topics"]}
    if request["replica_id"] >= 0:
        if authorization.allowed(ctx, which=1):
            return {}
        return dict.fromkeys(names, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    refused = {name: authorization.error(ctx, name) for name in names}
    return {name: code for name, code in refused.items() if code}


def _read_all(ctx: RequestContext, request: dict[str, Any], first_pass: bool,
              zstd_topics: frozenset[str] = frozenset(),
              refused: dict[str, int] | None = None,
              ) -> tuple[list[tuple[str, list[FetchResponseRow]]], int, int, bool, bool]:
    """One pass over the request's partitions: (responses, bytes read, throttled bytes, whether a
    throttled partition was held back, whether a partition outside `refused` topics has an error).

    A follower's fetch names every partition it follows, in every round of replication, and most
    are idle (all of its share of __consumer_offsets): the loop reads each partition's state once
    into locals, checks and records a follower's fetch in one call, and keeps the clock reading
    and the throttled set per request and topic, not per partition; each partition's answer is
    one tuple (protocol.fast.FetchResponseRow), made once its outcome is known."""
    services = ctx.services
    rm = services.replicas
    partitions = rm.partitions
    broker_id = services.broker_id
    version = ctx.api_version
    replica_id = request["replica_id"]
    consumer = replica_id < 0
    debug = replica_id == DEBUG_REPLICA_ID
    sends_files = ctx.conn.sends_files
    leader_quota = services.throttles.leader
    now_ms = 0.0 if consumer else rm.clock()  # one reading for the follower's whole request
    exceeded: bool | None = None  # measured at most once per pass
    limit = request.get("max_bytes", 0x7FFFFFFF) if version >= 3 else 0x7FFFFFFF
    min_one = version >= 3
    total = throttled_bytes = limited_bytes = 0
    held_back = errors = False
    # Consumers below Fetch v4 read an older message format; followers get the log as stored.
    convert_to = target_magic(version) if consumer else 2
    read_committed = version >= 4 and request.get("isolation_level", 0) == READ_COMMITTED
    storage_error = ErrorCode.KAFKA_STORAGE_ERROR if version > 5 else ErrorCode.NOT_LEADER_FOR_PARTITION
    allowance = float("inf")
    min_grant = 0.0
    # No transactions: READ_COMMITTED gets an empty list of aborted ones, READ_UNCOMMITTED null.
    # (One list for every partition: the encoder only reads it.)
    aborted: list[dict[str, int]] | None = [] if read_committed else None
    follower_fetch = rm.follower_fetch
    responses: list[tuple[str, list[FetchResponseRow]]] = []
    for topic in request["topics"]:
        name = topic["topic"]
        parts: list[FetchResponseRow] = []
        refused_code = refused.get(name, 0) if refused else 0
        throttled_here = _NO_PARTITIONS if consumer else leader_quota.throttled_partitions(name)
        zstd = name in zstd_topics
        for idx, asked_epoch, offset, partition_max_bytes in topic["partitions"]:
            if refused_code:
                parts.append(_failed(idx, refused_code))
                continue
            part = partitions.get((name, idx))
            if part is None:
                if rm.is_offline(name, idx):
                    code = storage_error
                else:
                    known = services.metadata.partition(name, idx) is not None
                    code = ErrorCode.NOT_LEADER_FOR_PARTITION if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(_failed(idx, code))
                errors = True
                continue
            if part.offline:
                parts.append(_failed(idx, storage_error))
                errors = True
                continue
            # Before the leader check, as Kafka's localLogWithEpochOrException does.
            if asked_epoch >= 0 and part.leader_epoch >= 0 and asked_epoch != part.leader_epoch:
                parts.append(_failed(idx, ErrorCode.FENCED_LEADER_EPOCH if asked_epoch < part.leader_epoch
                                     else ErrorCode.UNKNOWN_LEADER_EPOCH))
                errors = True
                continue
            if part.leader != broker_id and not debug:
                parts.append(_failed(idx, ErrorCode.NOT_LEADER_FOR_PARTITION))
                errors = True
                continue
            throttled = limited = False
            if not consumer:
                # Validated before anything is recorded: a fetch offset is taken as the
                # follower's log end, and one the leader does not have (or a replica id
                # posing as a follower) would move the high watermark. Recorded only when the
                # request arrives, as Kafka does (fetchMessages, not the delayed fetch's
                # re-reads): a long poll re-read after the controller dropped this follower
                # (controlled shutdown) would put a replica that is going away back into the
                # ISR and pin the high watermark to its log end until it lags out.
                check = follower_fetch(part, replica_id, offset, record=first_pass, now_ms=now_ms)
                if check == "out_of_range":
                    parts.append(_failed(idx, ErrorCode.OFFSET_OUT_OF_RANGE))
                    errors = True
                    continue
                if check == "not_assigned":
                    # Kafka 2.8's answer: no error, empty records, the high watermark.
                    parts.append(_answer(idx, part))
                    continue
                throttled = idx in throttled_here
                limited = throttled and replica_id not in part.isr
                if limited:
                    if exceeded is None:
                        exceeded = leader_quota.is_quota_exceeded()
                        allowance = leader_quota.allowance()
                        min_grant = leader_quota.min_grant()
                    # Wait for a grant worth sending (or for the whole ask, when it is smaller).
                    grant_floor = max(min(partition_max_bytes, limit, min_grant), 1)
                    if exceeded or allowance - limited_bytes < grant_floor:
                        held_back = True
                        parts.append(_answer(idx, part))
                        continue
            if zstd:
                # Kafka's maybeConvertFetchedData: a zstd topic to a consumer below Fetch v10.
                parts.append(_failed(idx, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE))
                errors = True
                continue
            log = part.log
            hw = part.high_watermark
            log_start = log.log_start_offset
            if offset == (hw if consumer else log.log_end_offset) and log_start <= offset:
                # Caught up: nothing to read, and the read would find nothing (an empty slice).
                # Most partitions of a follower's fetch are idle (all of __consumer_offsets in
                # every round of replication), and each costed a log lookup on every pass.
                parts.append((idx, 0, hw, hw, log_start, aborted, b"", -1))
                continue
            size = max(0, min(partition_max_bytes, limit))
            if limited:
                size = int(min(size, allowance - limited_bytes))
            try:
                # A converting v0-2 read takes its first entry whole, to cut after conversion.
                # A throttled read ends on a whole batch: the follower appends only whole ones and
                # asks again for a cut-off tail, which would have spent the quota twice (a capped
                # grant is rarely a whole number of batches: 10-20% of a throttled move was resent).
                sl = rm.read(part, offset, size, consumer=consumer,
                             min_one_message=min_one or (convert_to < 2 and version < 3), allow_partial=version < 3,
                             whole_entries=limited)
                # A large slice stored as is goes out as the file range itself on plain TCP
                # (broker.network sends it with sendfile, or reads it if it must wait).
                data = sl if sl.length >= SENDFILE_FROM and convert_to == 2 and sends_files else (
                    sl.read_bytes() if sl.length else b"")
            except OffsetOutOfRange:
                parts.append((idx, ErrorCode.OFFSET_OUT_OF_RANGE, hw, hw, log_start, aborted, b"", -1))
                errors = True
                continue
            except KafkaStorageError:
                parts.append((idx, storage_error, hw, hw, log_start, aborted, b"", -1))
                errors = True
                continue
            except OSError as e:  # the pread of the slice itself
                rm.fail_dir("read", e)
                parts.append((idx, storage_error, hw, hw, log_start, aborted, b"", -1))
                errors = True
                continue
            if convert_to < 2 and data:
                # Bytes: only a read that is not converted (convert_to == 2) is sent as a FileSlice.
                # (cast, not isinstance: nothing is checked at run time; this branch only for old formats.)
                stored = cast(bytes, data)
                if needs_conversion(stored, convert_to):
                    try:
                        converted = down_convert(stored, convert_to, offset)
                    except RecordsError as e:  # ZStandard (UNSUPPORTED_COMPRESSION_TYPE), or a corrupt log
                        parts.append((idx, e.error_code, hw, hw, log_start, aborted, b"", -1))
                        errors = True
                        continue
                    data = fit(converted, size, min_one, allow_partial=version < 3)
                elif len(stored) > size:
                    data = stored[:size]  # Fetch v0-2: a first message above the limit is sent cut, as stored
            parts.append((idx, 0, hw, hw, log_start, aborted, data or b"", -1))
            if data:
                total += len(data)
                if throttled:
                    throttled_bytes += len(data)
                if limited:
                    limited_bytes += len(data)
                if version >= 3:
                    limit -= len(data)
                    min_one = False
        responses.append((name, parts))
    return responses, total, throttled_bytes, held_back, errors


_NO_PARTITIONS: frozenset[int] = frozenset()
_NO_TOPICS: frozenset[str] = frozenset()


def _failed(idx: int, code: int) -> FetchResponseRow:
    """A partition's answer with an error: no offsets, no records."""
    return (idx, code, -1, -1, -1, None, b"", -1)


def _answer(idx: int, part: Partition) -> FetchResponseRow:
    """A partition's answer without records or error: its offsets (no transactions, so the last
    stable offset is the high watermark)."""
    hw = part.high_watermark
    return (idx, 0, hw, hw, part.log.log_start_offset, None, b"", -1)


async def _zstd_topics(ctx: RequestContext, request: dict[str, Any]) -> frozenset[str]:
    """Topics of a consumer's Fetch v0-9 whose compression.type is zstd (Kafka refuses them to
    clients that predate zstd). Only topics this broker leads a requested partition of are
    looked up: their configs are cached, so this does not reach ZooKeeper per request."""
    if ctx.api_version >= ZSTD_FETCH_FROM or request["replica_id"] >= 0:
        return frozenset()
    services = ctx.services
    out = set()
    for topic in request["topics"]:
        name = topic["topic"]
        led = any((part := services.replicas.get(name, fp[0])) is not None
                  and part.leader == services.broker_id for fp in topic["partitions"])
        if not led:
            continue
        configs = services.roles.topic_configs
        cfg = configs.cached(name)
        if cfg is None:
            # A ZooKeeper read is bound to its task (asyncio.timeout): not in the reading task.
            await ctx.conn.leave_reader()
            cfg = await configs.get(name)
        if cfg.get("compression.type") == "zstd":
            out.add(name)
    return frozenset(out)


async def handle(ctx: RequestContext, request: dict[str, Any]) -> list[bytes]:
    services = ctx.services
    if ctx.api_version >= 7 and request.get("session_epoch", -1) not in FULL_FETCH_EPOCHS:
        # An incremental fetch names a session; none is ever created (session_id 0 in every
        # answer), so it cannot exist: Kafka's SessionErrorContext answer.
        return encode_fetch_response_rows(ctx.api_version, 0, [], ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    rm = services.replicas
    consumer = request["replica_id"] < 0
    throttle_ms = 0
    if consumer:
        throttle_ms = services.fetch_quotas.throttle_before(ctx.client_id, services.now_ms(),
                                                           user=quota_user(ctx.principal))
        if throttle_ms:
            await asyncio.sleep(throttle_ms / 1000)
    deadline = time.monotonic() + max(request["max_wait_ms"], 0) / 1000
    min_bytes = request["min_bytes"]
    first_pass = True
    keys: list[tuple[str, int]] | None = None
    zstd_topics = await _zstd_topics(ctx, request) if consumer and ctx.api_version < ZSTD_FETCH_FROM else _NO_TOPICS
    refused = _refused_topics(ctx, request)
    while True:
        # A refused topic's partitions do not count among `errors`: they do not end the wait (as
        # Kafka, where only the authorized partitions go to the delayed fetch), or a consumer
        # holding one would poll in a loop.
        responses, total, throttled_bytes, held_back, errors = _read_all(ctx, request, first_pass, zstd_topics,
                                                                         refused)
        first_pass = False
        remaining = deadline - time.monotonic()
        if total >= min_bytes or remaining <= 0 or errors:
            if throttled_bytes:
                services.throttles.leader.record(throttled_bytes)
            pieces = encode_fetch_response_rows(ctx.api_version, throttle_ms, responses)
            if consumer:
                services.fetch_quotas.record_only(ctx.client_id, 4 + sum(len(p) for p in pieces), services.now_ms(),
                                                  user=quota_user(ctx.principal))
            return pieces
        # Not enough yet: what was read is read again on waking, so the wait holds none of it
        # (a long poll on a busy partition would otherwise pin up to max_bytes for max_wait_ms).
        del responses
        # From here the request only waits: the connection's next request may be read.
        ctx.conn.request_processed()
        if keys is None:
            keys = [(t["topic"], fp[0]) for t in request["topics"] for fp in t["partitions"]]
        # Woken only by the partitions it asks for (an append elsewhere costs it nothing).
        # Partitions held back by the leader throttle get their budget back continuously, so
        # look again soon rather than only when something is appended.
        await rm.wait_for_fetch(keys, follower=not consumer,
                                timeout_s=min(remaining, THROTTLE_RECHECK_S) if held_back else remaining)


def served_versions() -> tuple[int, int]:
    """Fetch 0-12 when Produce 3-9 is served, else 0-3 (module docstring)."""
    if produce_versions()[1] >= RECORD_BATCH_PRODUCE_FROM:
        versions: tuple[int, int] = messages.VERSIONS
        return versions
    return MESSAGE_FORMAT_V1_VERSIONS


register(messages, handle, decode, versions=served_versions())
