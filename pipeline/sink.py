"""Writes: `df.write` (batch) and `df.writeStream` (streaming) into minibroker topics.

Columns are those of Spark's Kafka sink: `value` (string or binary, required; null writes a
record with a null value), `key` (string or binary), `topic` (string; required unless the
option `topic` is set, which then wins), `partition` (int; null or absent: the default
partitioner) and `headers` (array<struct<key string, value binary>>, written as the records'
RecordBatch v2 headers). The column types are checked when the query starts, before any task
runs. Each Spark task produces its rows with acks=all (by default) and, by default, as an
idempotent producer of its own (pipeline.producer): a request retried inside the task never
appends twice. Rows reach the writer as Arrow batches (Spark's Arrow writers), so no Row
object is built per record; pyspark 4.0 has no Arrow stream writer and gets Rows there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from pipeline.client import BrokerSession, MinibrokerError
from pipeline.options import WriteOptions
from pipeline.producer import Appended, TaskProducer, now_ms

try:  # pyspark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError:  # pragma: no cover - depends on the installed pyspark
    DataSourceStreamArrowWriter = None  # type: ignore[assignment,misc]

_log = logging.getLogger(__name__)

HEADERS_TYPE = "array<struct<key:string,value:binary>>"
_BYTES_OR_TEXT = (BinaryType, StringType)


@dataclass
class ProducedMessage(WriterCommitMessage):
    """What one task appended, per (topic, partition), and its producer id; for logs and tests."""

    appended: Appended


@dataclass(frozen=True)
class SinkColumns:
    """Where each of the sink's columns is in the written rows (None: not there)."""

    value: int
    key: int | None
    topic: int | None
    partition: int | None
    headers: int | None

    @classmethod
    def of(cls, schema: StructType, options: WriteOptions) -> SinkColumns:
        names = [f.name for f in schema.fields]

        def find(name: str, allowed: tuple[type[DataType], ...], what: str, required: bool = False) -> int | None:
            if name not in names:
                if required:
                    raise MinibrokerError(f"the minibroker sink needs a {name!r} column ({what}); "
                                          f"the DataFrame has {names}")
                return None
            i = names.index(name)
            if not isinstance(schema.fields[i].dataType, allowed):
                raise MinibrokerError(f"column {name!r} must be {what}, not {schema.fields[i].dataType.simpleString()}")
            return i

        value = find("value", _BYTES_OR_TEXT, "string or binary", required=True)
        assert value is not None
        headers = find("headers", (ArrayType,), HEADERS_TYPE)
        if headers is not None and schema.fields[headers].dataType.simpleString() != HEADERS_TYPE:
            raise MinibrokerError(f"column 'headers' must be {HEADERS_TYPE}, "
                                  f"not {schema.fields[headers].dataType.simpleString()}")
        topic = find("topic", (StringType,), "string", required=options.topic is None)
        return cls(value=value, key=find("key", _BYTES_OR_TEXT, "string or binary"), topic=topic,
                   partition=find("partition", (IntegerType, LongType, ShortType), "int"), headers=headers)


def _as_bytes(value: Any, column: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise MinibrokerError(f"column {column!r} holds a {type(value).__name__}, not string or binary")


def _headers(value: Any) -> Sequence[tuple[str, bytes | None]]:
    """A `headers` cell (Arrow: list of dicts; Rows: list of Rows; either indexable by name)."""
    if not value:
        return ()
    out = []
    for h in value:
        key = h["key"]
        if key is None:
            raise MinibrokerError("column 'headers' holds a header with a null key (Kafka header keys are strings)")
        out.append((key, _as_bytes(h["value"], "headers")))
    return out


def write_rows(options: WriteOptions, columns: SinkColumns, rows: Iterable[Sequence[Any]]) -> ProducedMessage:
    """Produces `rows` (sequences indexed as `columns` says) as one task; returns what it appended."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    with BrokerSession(options.settings) as session:
        producer = TaskProducer(session, options.acks, options.codec, options.batch_bytes, options.idempotent,
                                round_robin_start=ctx.partitionId() if ctx is not None else 0)
        timestamp = now_ms()
        for n, row in enumerate(rows):
            if n % 1024 == 0:
                timestamp = now_ms()
            topic = options.topic or (row[columns.topic] if columns.topic is not None else None)
            if not topic:
                raise MinibrokerError("a row has no topic: set option topic or fill the topic column")
            key = _as_bytes(row[columns.key], "key") if columns.key is not None else None
            value = _as_bytes(row[columns.value], "value")
            chosen = row[columns.partition] if columns.partition is not None else None
            if chosen is None:
                chosen = producer.choose(topic, key)
            else:
                count = producer.partition_count(topic)
                if not 0 <= chosen < count:
                    raise MinibrokerError(f"partition {chosen} does not exist: topic {topic!r} has {count}")
            headers = _headers(row[columns.headers]) if columns.headers is not None else ()
            producer.add(topic, int(chosen), key, value, headers, timestamp)
        producer.flush_all()
    return ProducedMessage(producer.appended)


def _arrow_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[Sequence[Any]]:
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


class MinibrokerWriter(DataSourceArrowWriter):
    """`df.write.format("minibroker")`: each task produces its rows (see the module doc)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.columns = SinkColumns.of(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedMessage:
        return write_rows(self.options, self.columns, _arrow_rows(iterator))

    def commit(self, messages: list[ProducedMessage | None]) -> None:  # type: ignore[override]
        """Nothing to finish: every task's records were acknowledged before it reported success."""

    def abort(self, messages: list[ProducedMessage | None]) -> None:  # type: ignore[override]
        """Nothing to undo: Kafka has no way to take back appended records (see docs/pyspark.md)."""
        _log.warning("minibroker write aborted: %s", _summary(messages))


def _summary(messages: Sequence[ProducedMessage | None]) -> str:
    done = [m for m in messages if m is not None]
    total = sum(sum(m.appended.counts.values()) for m in done)
    return f"{len(done)} of {len(messages)} tasks finished and appended {total} records, which stay in the topics"


class MinibrokerStreamWriter(DataSourceStreamWriter):
    """`df.writeStream.format("minibroker")`, for each micro-batch as `MinibrokerWriter` (Rows)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.columns = SinkColumns.of(schema, options)

    def write(self, iterator: Iterator[Any]) -> ProducedMessage:
        return write_rows(self.options, self.columns, iterator)

    def commit(self, messages: list[ProducedMessage | None], batchId: int) -> None:  # type: ignore[override] # noqa: N803
        """Nothing to finish: Spark records the batch in the checkpoint's commit log after this."""

    def abort(self, messages: list[ProducedMessage | None], batchId: int) -> None:  # type: ignore[override] # noqa: N803
        _log.warning("minibroker micro-batch %d aborted: %s", batchId, _summary(messages))


if DataSourceStreamArrowWriter is not None:
    class MinibrokerStreamArrowWriter(MinibrokerStreamWriter, DataSourceStreamArrowWriter):
        """pyspark 4.1+: the stream writer fed Arrow batches, as the batch writer is."""

        def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedMessage:
            return write_rows(self.options, self.columns, _arrow_rows(iterator))


def stream_writer(options: WriteOptions, schema: StructType) -> MinibrokerStreamWriter:
    """The stream writer for the installed pyspark (Arrow batches from 4.1 on)."""
    if DataSourceStreamArrowWriter is not None:
        return MinibrokerStreamArrowWriter(options, schema)
    return MinibrokerStreamWriter(options, schema)
