"""The `minibroker` data source: batch and streaming reads of one topic, and batch writes.

Spark plans on the driver side and reads in executor processes, all of them Python workers
that unpickle these objects. Planning (which partitions, which offsets) talks to the cluster
once per query or micro-batch; each task then reads one topic partition's offset range on its
own connection. Streaming offsets are `{"topic": {"partition": next offset}}` dicts, the
same shape as the `startingOffsets` option; Spark keeps them in the query's checkpoint, which
is what makes a restarted query resume exactly where it stopped. With the option
`commitOffsetsToGroup`, each processed micro-batch's end offsets are also committed to that
consumer group (OffsetCommit as a consumer outside the group), so the query's lag shows in
`minibroker groups --describe`; Spark's own Kafka source commits nothing anywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

try:  # pyspark 4.2+; before it, availableNow runs through Spark's own wrapper
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - depends on the installed pyspark
    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in so the class below can name the mixin on older pyspark."""

from pipeline.client import EARLIEST, LATEST, BrokerSession, MinibrokerError
from pipeline.options import STRATEGY_LATEST, OffsetSpec, ReadOptions, TimestampSpec, WriteOptions
from pipeline.rows import SCHEMA_DDL, record_batch
from pipeline.sink import MinibrokerWriter

Offsets = dict[int, int]  # partition -> offset

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


class MinibrokerDataSource(DataSource):
    """`spark.read/readStream/write.format("minibroker")`; see docs/pyspark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "minibroker"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return MinibrokerBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return MinibrokerStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise MinibrokerError("a topic can only be appended to: use mode('append')")
        return MinibrokerWriter(WriteOptions.parse(self.options), schema)


_SCHEMA_TYPES = [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
                 ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]


def _check_schema(schema: StructType) -> None:
    """Rows are built as Arrow batches of one fixed layout, so a user-given schema must match it."""
    if [(f.name, f.dataType.simpleString()) for f in schema.fields] != _SCHEMA_TYPES:
        raise MinibrokerError(f"the minibroker source has the fixed schema {SCHEMA_DDL!r}; got {schema.simpleString()}")


def read_range(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one planned offset range; nothing for Spark's placeholder partition."""
    if not isinstance(partition, OffsetRange) or partition.start >= partition.end:
        return
    with BrokerSession(options.settings) as session:
        for records in session.fetch_range(partition.topic, partition.partition, partition.start,
                                           partition.end, options.fetch_max_bytes):
            yield record_batch(partition.topic, partition.partition, records)


def _resolve(spec: OffsetSpec, option: str, topic: str, partitions: list[int], earliest: Offsets,
             latest: Offsets) -> Offsets:
    """Concrete offsets for every partition, each checked to lie within the log."""
    default, explicit = spec
    unknown = sorted(set(explicit) - set(partitions))
    if unknown:
        raise MinibrokerError(f"option {option} names partition(s) {unknown} of topic {topic!r}, "
                              f"which has partitions {partitions}")
    out: Offsets = {}
    for p in partitions:
        want = explicit.get(p, default)
        if want == EARLIEST:
            out[p] = earliest[p]
        elif want == LATEST:
            out[p] = latest[p]
        elif want < earliest[p] or want > latest[p]:
            raise MinibrokerError(
                f"option {option}: offset {want} of {topic}-{p} is beyond the log, which holds offsets "
                f"{earliest[p]}..{latest[p]} (earliest..latest = high watermark)")
        else:
            out[p] = want
    return out


def _by_timestamp(session: BrokerSession, spec: TimestampSpec, option: str, topic: str, partitions: list[int],
                  latest: Offsets, strategy: str) -> Offsets:
    """Offsets for Spark's timestamp options: the first offset whose record timestamp is >= the
    partition's timestamp (ListOffsets by timestamp). Where no record qualifies, `strategy`
    decides: STRATEGY_ERROR fails the query (Spark's default for the starting side),
    STRATEGY_LATEST takes the latest offset (the high watermark; always so on the ending side).
    """
    single, per_partition = spec
    if single is None and set(per_partition) != set(partitions):
        raise MinibrokerError(f"option {option} must name every partition of topic {topic!r}, {partitions}; "
                              f"it names {sorted(per_partition)}")
    asked = {p: single for p in partitions} if single is not None else per_partition
    found = session.offsets_for_times(topic, asked)
    out: Offsets = {}
    for p in partitions:
        if found[p] >= 0:
            out[p] = found[p]
        elif strategy == STRATEGY_LATEST:
            out[p] = latest[p]
        else:
            raise MinibrokerError(f"No offset matched from request of topic-partition {topic}-{p} and timestamp "
                                  f"{asked[p]} (option {option}): no record at or after it; option "
                                  f"startingOffsetsByTimestampStrategy=latest starts such partitions at the latest offset")
    return out


def _starting(options: ReadOptions, session: BrokerSession, partitions: list[int], earliest: Offsets,
              latest: Offsets) -> Offsets:
    """Where a batch or a new stream starts: startingTimestamp, else startingOffsetsByTimestamp,
    else startingOffsets, as in Spark."""
    topic = options.topic
    if options.starting_by_timestamp is not None:
        option = "startingTimestamp" if options.starting_by_timestamp[0] is not None else "startingOffsetsByTimestamp"
        return _by_timestamp(session, options.starting_by_timestamp, option, topic, partitions, latest,
                             options.starting_timestamp_strategy)
    return _resolve(options.starting, "startingOffsets", topic, partitions, earliest, latest)


class MinibrokerBatchReader(DataSourceReader):
    """Plans one OffsetRange per topic partition between startingOffsets and endingOffsets."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._ranges: list[OffsetRange] | None = None

    def _plan(self) -> list[OffsetRange]:
        topic = self.options.topic
        with BrokerSession(self.options.settings) as session:
            partitions = session.partitions(topic)
            earliest = session.list_offsets(topic, partitions, EARLIEST)
            latest = session.list_offsets(topic, partitions, LATEST)
            start = _starting(self.options, session, partitions, earliest, latest)
            ending_ts = self.options.ending_by_timestamp
            if ending_ts is not None:
                option = "endingTimestamp" if ending_ts[0] is not None else "endingOffsetsByTimestamp"
                end = _by_timestamp(session, ending_ts, option, topic, partitions, latest, STRATEGY_LATEST)
            else:
                end = _resolve(self.options.ending, "endingOffsets", topic, partitions, earliest, latest)
        for p in partitions:
            if start[p] > end[p]:
                raise MinibrokerError(f"startingOffsets {start[p]} of {topic}-{p} is after its endingOffsets {end[p]}")
        return [OffsetRange(topic, p, start[p], end[p]) for p in partitions]

    def partitions(self) -> list[InputPartition]:
        # One Spark partition per topic partition, even an empty one: the plan mirrors the topic.
        if self._ranges is None:
            self._ranges = self._plan()
        return list(self._ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)


def _as_offsets(doc: Mapping[str, Any] | None, topic: str) -> Offsets:
    """A streaming offset dict (as Spark hands it back from its checkpoint) for our topic."""
    if not doc:
        return {}
    if set(doc) != {topic}:
        raise MinibrokerError(f"the query's checkpoint holds offsets for {sorted(doc)}, but the source reads "
                              f"{topic!r}: start the changed query with a new checkpointLocation")
    return {int(p): int(o) for p, o in doc[topic].items()}


def _as_doc(topic: str, offsets: Offsets) -> dict[str, dict[str, int]]:
    return {topic: {str(p): offsets[p] for p in sorted(offsets)}}


class MinibrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of the offsets that arrived (below the high watermark) since the last one.

    availableNow: `prepareForTriggerAvailableNow` fixes the target at the high watermarks of
    that moment, and `latestOffset` never goes past it. Without the mixin, pyspark's fallback
    ended a restarted availableNow query after replaying the batch the previous run left
    uncommitted, leaving out what had arrived since (caught by the checkpoint-restart test).
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._target: Offsets | None = None
        self._committed: Offsets | None = None  # last offsets committed to options.commit_group

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets(LATEST)

    def _offsets(self, which: int) -> Offsets:
        with BrokerSession(self.options.settings) as session:
            partitions = session.partitions(self.options.topic)
            return session.list_offsets(self.options.topic, partitions, which)

    def initialOffset(self) -> dict:
        topic = self.options.topic
        with BrokerSession(self.options.settings) as session:
            partitions = session.partitions(topic)
            earliest = session.list_offsets(topic, partitions, EARLIEST)
            latest = session.list_offsets(topic, partitions, LATEST)
            return _as_doc(topic, _starting(self.options, session, partitions, earliest, latest))

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """The high watermark of every partition, capped by maxOffsetsPerTrigger if set.

        Spark before 4.2 calls this without arguments and knows no read limits; Spark 4.2+
        passes the batch's start and a ReadLimit (ReadAllAvailable for availableNow's last
        planning, ReadMaxRows from getDefaultReadLimit otherwise).
        """
        topic = self.options.topic
        self._commit_to_group(start)
        latest = self._offsets(LATEST)
        if self._target is not None:
            latest = {p: min(o, self._target.get(p, o)) for p, o in latest.items()}
        cap = self.options.max_offsets_per_trigger
        if cap is None:
            return _as_doc(topic, latest)
        if start is None:
            raise MinibrokerError("option maxOffsetsPerTrigger needs pyspark 4.2 or later (read limits)")
        max_rows = getattr(limit, "maxRows", None) if type(limit).__name__ == "ReadMaxRows" else None
        if max_rows is None:
            return _as_doc(topic, latest)
        begin = _as_offsets(start, topic)
        missing = [p for p in latest if p not in begin]
        if missing:
            earliest = self._offsets(EARLIEST)
            begin.update({p: earliest[p] for p in missing})
        return _as_doc(topic, _cap(begin, latest, int(max_rows)))

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_offsets_per_trigger is None:
            return super().getDefaultReadLimit()
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        topic = self.options.topic
        begin, stop = _as_offsets(start, topic), _as_offsets(end, topic)
        if any(p not in begin for p in stop):
            # Partitions added to the topic since the last batch are read from their beginning.
            earliest = self._offsets(EARLIEST)
            for p in stop:
                begin.setdefault(p, earliest.get(p, 0))
        ranges: list[InputPartition] = []
        for p in sorted(stop):
            if begin[p] > stop[p]:
                raise MinibrokerError(f"{topic}-{p}: batch start offset {begin[p]} is after its end {stop[p]}; "
                                      f"was the topic deleted and re-created?")
            if begin[p] < stop[p]:
                ranges.append(OffsetRange(topic, p, begin[p], stop[p]))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Spark has processed everything below `end`: with `commitOffsetsToGroup`, tell the group."""
        self._commit_to_group(end)

    def _commit_to_group(self, processed: dict | None) -> None:
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
        offsets = _as_offsets(processed, self.options.topic)
        if offsets == self._committed:
            return
        try:
            with BrokerSession(self.options.settings) as session:
                session.commit_offsets(group, self.options.topic, offsets)
        except MinibrokerError as e:
            _log.warning("could not commit offsets %s of topic %r to group %r: %s", offsets, self.options.topic,
                         group, e)
            return
        self._committed = offsets


def _cap(begin: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """End offsets that admit at most max_rows new offsets, shared in proportion to the backlog."""
    backlog = {p: max(latest[p] - begin.get(p, 0), 0) for p in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    share = {p: backlog[p] * max_rows // total for p in latest}
    left = max_rows - sum(share.values())
    for p in sorted(latest, key=lambda p: backlog[p] - share[p], reverse=True):
        if left == 0:
            break
        if share[p] < backlog[p]:
            share[p] += 1
            left -= 1
    return {p: begin.get(p, 0) + share[p] for p in latest}
