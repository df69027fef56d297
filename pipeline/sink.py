"""Batch writes: each Spark task produces its rows with acks=all (by default) over its own connection.

Rows need a `value` column (string or binary); `key`, `partition` and `topic` columns are
optional, as in Spark's Kafka sink. Records are gathered per topic partition and sent as one
message set once `batch.size` bytes have piled up, keeping a partition's rows in task order.
There is no transaction: a failed job leaves what its finished requests appended.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, LongType, ShortType, StringType, StructType

from pipeline.client import BrokerSession, MinibrokerError
from pipeline.options import WriteOptions
from pipeline.partitioner import RoundRobin, partition_for_key

_BYTES_OR_TEXT = (BinaryType, StringType)
_MESSAGE_OVERHEAD = 34  # log entry header + magic-1 message header: bytes a record adds besides key/value


@dataclass
class ProducedMessage(WriterCommitMessage):
    """What one task appended, per (topic, partition): record counts, for logs and tests."""

    counts: dict[tuple[str, int], int] = field(default_factory=dict)


def _column_index(schema: StructType, name: str, allowed: tuple[type, ...], required: bool) -> int | None:
    names = [f.name for f in schema.fields]
    if name not in names:
        if required:
            raise MinibrokerError(f"the minibroker sink needs a {name!r} column (string or binary); "
                                  f"the DataFrame has {names}")
        return None
    i = names.index(name)
    if not isinstance(schema.fields[i].dataType, allowed):
        kinds = " or ".join(t.__name__.removesuffix("Type").lower() for t in allowed)
        raise MinibrokerError(f"column {name!r} must be {kinds}, not {schema.fields[i].dataType.simpleString()}")
    return i


def _as_bytes(value: Any, column: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise MinibrokerError(f"column {column!r} holds a {type(value).__name__}, not string or binary")


class MinibrokerWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.value_at = _column_index(schema, "value", _BYTES_OR_TEXT, required=True)
        self.key_at = _column_index(schema, "key", _BYTES_OR_TEXT, required=False)
        self.partition_at = _column_index(schema, "partition", (IntegerType, LongType, ShortType), required=False)
        self.topic_at = _column_index(schema, "topic", (StringType,), required=options.topic is None)

    def write(self, iterator: Iterator[Any]) -> ProducedMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        robin = RoundRobin(ctx.partitionId() if ctx is not None else 0)
        sent = ProducedMessage()
        with BrokerSession(self.options.settings) as session:
            partition_counts: dict[str, int] = {}
            pending: dict[tuple[str, int], list[tuple[bytes | None, bytes | None, int]]] = {}
            pending_bytes: dict[tuple[str, int], int] = {}

            def flush(tp: tuple[str, int]) -> None:
                records = pending.pop(tp, [])
                pending_bytes.pop(tp, None)
                if records:
                    session.produce(tp[0], tp[1], records, acks=self.options.acks, codec=self.options.codec)
                    sent.counts[tp] = sent.counts.get(tp, 0) + len(records)

            for row in iterator:
                topic = self.options.topic or (row[self.topic_at] if self.topic_at is not None else None)
                if not topic:
                    raise MinibrokerError("a row has no topic: set option topic or fill the topic column")
                if topic not in partition_counts:
                    partition_counts[topic] = len(session.partitions(topic))
                count = partition_counts[topic]
                key = _as_bytes(row[self.key_at], "key") if self.key_at is not None else None
                value = _as_bytes(row[self.value_at], "value")
                chosen = row[self.partition_at] if self.partition_at is not None else None
                if chosen is None:
                    chosen = partition_for_key(key, count) if key is not None else robin.choose(count)
                elif not 0 <= chosen < count:
                    raise MinibrokerError(f"partition {chosen} does not exist: topic {topic!r} has {count}")
                tp = (topic, int(chosen))
                pending.setdefault(tp, []).append((key, value, int(time.time() * 1000)))
                size = pending_bytes.get(tp, 0) + _MESSAGE_OVERHEAD + len(key or b"") + len(value or b"")
                pending_bytes[tp] = size
                if size >= self.options.batch_bytes:
                    flush(tp)
            for tp in list(pending):
                flush(tp)
        return sent

    def commit(self, messages: list[ProducedMessage | None]) -> None:
        """Nothing to finish: every task's records were acknowledged before it reported success."""

    def abort(self, messages: list[ProducedMessage | None]) -> None:
        """Nothing to undo: Kafka has no way to take back appended records (see the module doc)."""
