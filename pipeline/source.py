"""The `minibroker` data source: batch and streaming reads, and batch writes.

Spark plans on the driver side and reads in executor processes, all of them Python workers
that unpickle these objects. Planning (which partitions, which offsets) talks to the cluster
once per query or micro-batch; each task then reads one offset range of one topic partition
on its own connection. Which partitions a query reads follows Spark's Kafka source: `subscribe`
(topics by name), `subscribePattern` (topics whose name matches, looked up again at every
trigger, so topics created later join a running stream from their earliest offset) or
`assign` (partitions by number). Streaming offsets are `{"topic": {"partition": next offset}}` dicts, the
same shape as the `startingOffsets` option; Spark keeps them in the query's checkpoint, which
is what makes a restarted query resume exactly where it stopped. With the option
`commitOffsetsToGroup`, each processed micro-batch's end offsets are also committed to that
consumer group (OffsetCommit as a consumer outside the group), so the query's lag shows in
`minibroker groups --describe`; Spark's own Kafka source commits nothing anywhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

try:  # pyspark 4.2+; before it, availableNow runs through Spark's own wrapper
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - depends on the installed pyspark
    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in so the class below can name the mixin on older pyspark."""

from pipeline.client import (
    DATA_LOSS_FAIL,
    DATA_LOSS_SKIP,
    EARLIEST,
    LATEST,
    BrokerSession,
    DataLossError,
    MinibrokerError,
)
from pipeline.options import STRATEGY_LATEST, OffsetSpec, ReadOptions, TimestampSpec, WriteOptions
from pipeline.ranges import Range, split_ranges
from pipeline.rows import SCHEMA_DDL, SCHEMA_WITH_HEADERS_DDL, record_batch
from pipeline.sink import MinibrokerWriter, stream_writer

TP = tuple[str, int]  # (topic, partition)
Offsets = dict[TP, int]  # (topic, partition) -> offset

_log = logging.getLogger(__name__)


class OffsetRange(InputPartition):
    """One Spark task's work: records start <= offset < end of one topic partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _tasks(ranges: list[Range], min_partitions: int | None) -> list[InputPartition]:
    return [OffsetRange(*r) for r in split_ranges(ranges, min_partitions)]


class MinibrokerDataSource(DataSource):
    """`spark.read/readStream/write.format("minibroker")`; see docs/pyspark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "minibroker"

    def schema(self) -> str:
        # Spark's Kafka source adds the headers column only with includeHeaders=true.
        include = {str(k).lower(): str(v) for k, v in self.options.items()}.get("includeheaders", "false")
        return SCHEMA_WITH_HEADERS_DDL if include.strip().lower() == "true" else SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options, streaming=False)
        _check_schema(schema, options.include_headers)
        return MinibrokerBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = ReadOptions.parse(self.options, streaming=True)
        _check_schema(schema, options.include_headers)
        return MinibrokerStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise MinibrokerError("a topic can only be appended to: use mode('append')")
        return MinibrokerWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        return stream_writer(WriteOptions.parse(self.options), schema)


_SCHEMA_TYPES = [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
                 ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
_HEADERS_TYPE = ("headers", "array<struct<key:string,value:binary>>")


def _check_schema(schema: StructType, headers: bool) -> None:
    """Rows are built as Arrow batches of one fixed layout, so a user-given schema must match it."""
    expected = _SCHEMA_TYPES + [_HEADERS_TYPE] if headers else _SCHEMA_TYPES
    if [(f.name, f.dataType.simpleString()) for f in schema.fields] != expected:
        ddl = SCHEMA_WITH_HEADERS_DDL if headers else SCHEMA_DDL
        raise MinibrokerError(f"the minibroker source has the fixed schema {ddl!r}; got {schema.simpleString()}")


def read_range(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one planned offset range; nothing for Spark's placeholder partition."""
    if not isinstance(partition, OffsetRange) or partition.start >= partition.end:
        return
    with BrokerSession(options.settings) as session:
        for records in session.fetch_range(partition.topic, partition.partition, partition.start, partition.end,
                                           options.fetch_max_bytes, with_headers=options.include_headers,
                                           fail_on_data_loss=options.fail_on_data_loss):
            yield record_batch(partition.topic, partition.partition, records, options.include_headers)


# ---- the query's topic partitions and their offsets ----------------------------------------------------

def _by_topic(tps: Iterable[TP]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


def _assigned(options: ReadOptions, session: BrokerSession, running: bool = False) -> list[TP]:
    """The topic partitions the query reads now.

    Starting (not `running`), a named topic that does not exist fails the query (it is never
    created) and `assign` must name existing partitions. A running stream takes what exists:
    topics deleted meanwhile are left out (the caller reports it as data loss) and, with
    subscribePattern, every topic whose name matches now is in (Kafka's admin listing,
    internal topics left out, as Spark's SubscribePatternStrategy does).
    """
    sub = options.subscription
    if sub.pattern is not None or running:
        listing = session.topic_partitions()
        if sub.assigned:
            return [tp for tp in sub.assigned if tp[1] in listing.get(tp[0], ())]
        return [(t, p) for t in sorted(listing) if sub.matches(t) for p in listing[t]]
    if sub.assigned:
        for topic, wanted in _by_topic(sub.assigned).items():
            have = session.partitions(topic)
            missing = sorted(set(wanted) - set(have))
            if missing:
                raise MinibrokerError(f"option assign names partition(s) {missing} of topic {topic!r}, "
                                      f"which has partitions {have}")
        return list(sub.assigned)
    return [(t, p) for t in sub.topics for p in session.partitions(t)]


def _list(session: BrokerSession, tps: Iterable[TP], which: int) -> Offsets:
    """EARLIEST or LATEST offsets of `tps`, one ListOffsets round per topic."""
    out: Offsets = {}
    for topic, partitions in _by_topic(tps).items():
        out.update({(topic, p): o for p, o in session.list_offsets(topic, partitions, which).items()})
    return out


def _resolve(spec: OffsetSpec, option: str, tps: list[TP], earliest: Offsets, latest: Offsets) -> Offsets:
    """Concrete offsets for every partition, each checked to lie within the log."""
    default, explicit = spec
    have = _by_topic(tps)
    for topic, offsets in explicit.items():
        unknown = sorted(set(offsets) - set(have.get(topic, [])))
        if unknown:
            raise MinibrokerError(f"option {option} names partition(s) {unknown} of topic {topic!r}, "
                                  f"which has partitions {have.get(topic, [])}")
    out: Offsets = {}
    for tp in tps:
        want = explicit.get(tp[0], {}).get(tp[1], default)
        if want == EARLIEST:
            out[tp] = earliest[tp]
        elif want == LATEST:
            out[tp] = latest[tp]
        elif want < earliest[tp] or want > latest[tp]:
            raise MinibrokerError(
                f"option {option}: offset {want} of {tp[0]}-{tp[1]} is beyond the log, which holds offsets "
                f"{earliest[tp]}..{latest[tp]} (earliest..latest = high watermark)")
        else:
            out[tp] = want
    return out


def _by_timestamp(session: BrokerSession, spec: TimestampSpec, option: str, tps: list[TP], latest: Offsets,
                  strategy: str) -> Offsets:
    """Offsets for Spark's timestamp options: the first offset whose record timestamp is >= the
    partition's timestamp (ListOffsets by timestamp). Where no record qualifies, `strategy`
    decides: STRATEGY_ERROR fails the query (Spark's default for the starting side),
    STRATEGY_LATEST takes the latest offset (the high watermark; always so on the ending side).
    """
    single, per_partition = spec
    named = {(t, p) for t, ps in per_partition.items() for p in ps}
    if single is None and named != set(tps):
        raise MinibrokerError(f"option {option} must name every partition the query reads, "
                              f"{[f'{t}-{p}' for t, p in tps]}; it names {[f'{t}-{p}' for t, p in sorted(named)]}")
    asked = {tp: single if single is not None else per_partition[tp[0]][tp[1]] for tp in tps}
    out: Offsets = {}
    for topic, partitions in _by_topic(tps).items():
        found = session.offsets_for_times(topic, {p: asked[(topic, p)] for p in partitions})
        for p in partitions:
            if found[p] >= 0:
                out[(topic, p)] = found[p]
            elif strategy == STRATEGY_LATEST:
                out[(topic, p)] = latest[(topic, p)]
            else:
                raise MinibrokerError(
                    f"No offset matched from request of topic-partition {topic}-{p} and timestamp "
                    f"{asked[(topic, p)]} (option {option}): no record at or after it; option "
                    f"startingOffsetsByTimestampStrategy=latest starts such partitions at the latest offset")
    return out


def _starting(options: ReadOptions, session: BrokerSession, tps: list[TP], earliest: Offsets,
              latest: Offsets) -> Offsets:
    """Where a batch or a new stream starts: startingTimestamp, else startingOffsetsByTimestamp,
    else startingOffsets, as in Spark."""
    if options.starting_by_timestamp is not None:
        option = "startingTimestamp" if options.starting_by_timestamp[0] is not None else "startingOffsetsByTimestamp"
        return _by_timestamp(session, options.starting_by_timestamp, option, tps, latest,
                             options.starting_timestamp_strategy)
    return _resolve(options.starting, "startingOffsets", tps, earliest, latest)


class MinibrokerBatchReader(DataSourceReader):
    """Plans the offset ranges between the starting and ending offsets: one per topic partition,
    or more with minPartitions (pipeline.ranges)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._ranges: list[InputPartition] | None = None

    def _plan(self) -> list[InputPartition]:
        with BrokerSession(self.options.settings) as session:
            tps = _assigned(self.options, session)
            earliest = _list(session, tps, EARLIEST)
            latest = _list(session, tps, LATEST)
            start = _starting(self.options, session, tps, earliest, latest)
            ending_ts = self.options.ending_by_timestamp
            if ending_ts is not None:
                option = "endingTimestamp" if ending_ts[0] is not None else "endingOffsetsByTimestamp"
                end = _by_timestamp(session, ending_ts, option, tps, latest, STRATEGY_LATEST)
            else:
                end = _resolve(self.options.ending, "endingOffsets", tps, earliest, latest)
        for t, p in tps:
            if start[(t, p)] > end[(t, p)]:
                raise MinibrokerError(f"The resolved start offset {start[(t, p)]} is greater than the resolved end "
                                      f"offset {end[(t, p)]} for topic {t} partition {p}")
        ranges = [Range(t, p, start[(t, p)], end[(t, p)]) for t, p in tps]
        # Like Spark: without splitting, one task per topic partition, even an empty one.
        minimum = self.options.min_partitions
        return _tasks(ranges, minimum if minimum is not None and minimum > len(ranges) else None)

    def partitions(self) -> list[InputPartition]:
        if self._ranges is None:
            self._ranges = self._plan()
        return list(self._ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)


def _as_offsets(doc: Mapping[str, Any] | None) -> Offsets:
    """A streaming offset dict (as Spark hands it back from its checkpoint)."""
    if not doc:
        return {}
    return {(str(t), int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


def _as_doc(offsets: Offsets) -> dict[str, dict[str, int]]:
    doc: dict[str, dict[str, int]] = {}
    for (t, p) in sorted(offsets):
        doc.setdefault(t, {})[str(p)] = offsets[(t, p)]
    return doc


def _names(tps: Iterable[TP]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


class MinibrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of the offsets that arrived (below the high watermark) since the last one.

    availableNow: `prepareForTriggerAvailableNow` fixes the target at the high watermarks of
    that moment, and `latestOffset` never goes past it. Without the mixin, pyspark's fallback
    ended a restarted availableNow query after replaying the batch the previous run left
    uncommitted, leaving out what had arrived since (caught by the checkpoint-restart test).

    Data loss (Spark's failOnDataLoss) is looked for when a batch is planned: partitions that
    disappeared, partitions added with an earliest offset above 0, a start below the log start
    (retention deleted records the query had not read) and a start above the end (the topic was
    re-created). With failOnDataLoss (the default) the query fails naming the partition and the
    lost range; without it, that is logged and the batch reads what is left.
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._target: Offsets | None = None
        self._committed: Offsets | None = None  # last offsets committed to options.commit_group
        self._latest: Offsets = {}  # every partition's high watermark at the last latestOffset
        self._last_trigger_ms = 0.0  # minOffsetsPerTrigger: when the last batch was let through

    def prepareForTriggerAvailableNow(self) -> None:
        with BrokerSession(self.options.settings) as session:
            self._target = _list(session, _assigned(self.options, session, running=True), LATEST)

    def initialOffset(self) -> dict[str, Any]:
        with BrokerSession(self.options.settings) as session:
            tps = _assigned(self.options, session)
            earliest = _list(session, tps, EARLIEST)
            latest = _list(session, tps, LATEST)
            return _as_doc(_starting(self.options, session, tps, earliest, latest))

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """The high watermark of every partition, within the read limits.

        Spark before 4.2 calls this without arguments and knows no read limits; Spark 4.2+
        passes the batch's start and a ReadLimit: ReadAllAvailable (availableNow, whose target
        still bounds it) or the default from getDefaultReadLimit, standing for this source's
        maxOffsetsPerTrigger / minOffsetsPerTrigger / maxTriggerDelay, applied here together
        as Spark's Kafka source applies its composite limit.
        """
        self._commit_to_group(start)
        with BrokerSession(self.options.settings) as session:
            latest = _list(session, _assigned(self.options, session, running=True), LATEST)
        if self._target is not None:
            latest = {tp: min(o, latest[tp]) for tp, o in self._target.items() if tp in latest}
        self._latest = latest
        max_rows, min_rows = self.options.max_offsets_per_trigger, self.options.min_offsets_per_trigger
        if max_rows is None and min_rows is None:
            return _as_doc(latest)
        if start is None:
            raise MinibrokerError("options maxOffsetsPerTrigger and minOffsetsPerTrigger need pyspark 4.2 or later "
                                  "(read limits)")
        if type(limit).__name__ == "ReadAllAvailable":
            return _as_doc(latest)
        begin = _as_offsets(start)
        missing = [tp for tp in latest if tp not in begin]
        if missing:
            with BrokerSession(self.options.settings) as session:
                begin.update(_list(session, missing, EARLIEST))
        # availableNow must reach its target, so it is never held back (Spark's ReadMinRows caveat).
        if min_rows is not None and self._target is None and self._delay(min_rows, begin, latest):
            return start
        if max_rows is None:
            return _as_doc(latest)
        return _as_doc(_cap(begin, latest, max_rows))

    def _delay(self, min_rows: int, begin: Offsets, latest: Offsets) -> bool:
        """Spark's delayBatch: hold the batch back while fewer than minOffsetsPerTrigger offsets are
        new, unless maxTriggerDelay has passed since the last batch that was let through."""
        now_ms = time.time() * 1000
        if now_ms - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now_ms
            return False
        if sum(latest[tp] - begin.get(tp, 0) for tp in latest) < min_rows:
            return True
        self._last_trigger_ms = now_ms
        return False

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows

        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return super().getDefaultReadLimit()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Every partition's high watermark at the last trigger, uncapped by maxOffsetsPerTrigger:
        Spark shows it as the source's `latestOffset` in StreamingQueryProgress, next to
        `endOffset`; their difference is the lag (pipeline.lag.offsets_behind_latest)."""
        return _as_doc(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, stop = _as_offsets(start), _as_offsets(end)
        with BrokerSession(self.options.settings) as session:
            present = set(_assigned(self.options, session, running=True)) & set(stop)
            earliest = _list(session, present, EARLIEST)
        deleted = set(begin) - set(stop)
        if deleted:
            reached = ", ".join(f"{t}-{p} from offset {begin[(t, p)]}" for t, p in sorted(deleted))
            self._data_loss(f"Partitions {_names(deleted)} have been deleted: records not yet read are lost "
                            f"({reached} on)")
        vanished = set(stop) - present
        if vanished:
            self._data_loss(f"Cannot find earliest offsets of {_names(vanished)}; they may have been deleted")
        ranges: list[Range] = []
        for tp in sorted(present):
            topic, p = tp
            if tp not in begin:  # added since the last batch: read from its beginning, as Spark does
                if earliest[tp] != 0:
                    self._data_loss(f"Added partition {topic}-{p} starts from {earliest[tp]} instead of 0")
                first = earliest[tp]
            else:
                first = begin[tp]
            if first > stop[tp]:
                self._data_loss(f"Partition {topic}-{p} offset was changed from {first} to {stop[tp]}: the topic may "
                                f"have been deleted and re-created")
                continue
            if first < earliest[tp]:
                lost_to = min(earliest[tp], stop[tp])
                self._data_loss(f"Could not read records in offset [{first}, {lost_to}) for topic partition "
                                f"{topic}-{p}: the log now starts at offset {earliest[tp]}")
                first = lost_to
            if first < stop[tp]:
                ranges.append(Range(topic, p, first, stop[tp]))
        return _tasks(ranges, self.options.min_partitions)

    def _data_loss(self, message: str) -> None:
        """Spark's reportDataLoss: fail the query (failOnDataLoss=true) or log a warning and go on."""
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}. {DATA_LOSS_FAIL}")
        _log.warning("%s. %s", message, DATA_LOSS_SKIP)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has processed everything below `end`: with `commitOffsetsToGroup`, tell the group."""
        self._commit_to_group(end)

    def _commit_to_group(self, processed: dict[str, Any] | None) -> None:
        """Commits `processed` (a streaming offset doc whose data Spark has fully processed) to the
        `commitOffsetsToGroup` group, unless that is what was committed last.

        Spark calls `commit(end)` for a batch only while it plans the next batch with data, so an
        idle query would show the last batch as lag for ever; `latestOffset(start)` (pyspark 4.2+)
        is called at every trigger with the end of the last completed batch, so it commits too.
        The query's position lives in Spark's checkpoint, which is what a restart resumes from;
        the group's offsets are a copy for operators (`minibroker groups --describe`, the
        coordinator's consumer_group_lag). So a commit that fails within `timeout.ms` is logged
        and the query goes on: a later one carries the same or later offsets anyway.
        """
        group = self.options.commit_group
        if group is None or not processed:
            return
        offsets = _as_offsets(processed)
        if offsets == self._committed:
            return
        try:
            with BrokerSession(self.options.settings) as session:
                for topic, parts in _by_topic(offsets).items():
                    session.commit_offsets(group, topic, {p: offsets[(topic, p)] for p in parts})
        except MinibrokerError as e:
            _log.warning("could not commit offsets %s to group %r: %s", _as_doc(offsets), group, e)
            return
        self._committed = offsets


def _cap(begin: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """End offsets that admit at most max_rows new offsets, shared in proportion to the backlog."""
    backlog = {tp: max(latest[tp] - begin.get(tp, 0), 0) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    share = {tp: backlog[tp] * max_rows // total for tp in latest}
    left = max_rows - sum(share.values())
    for tp in sorted(latest, key=lambda tp: backlog[tp] - share[tp], reverse=True):
        if left == 0:
            break
        if share[tp] < backlog[tp]:
            share[tp] += 1
            left -= 1
    return {tp: begin.get(tp, 0) + share[tp] for tp in latest}
