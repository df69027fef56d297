"""The sink's pure parts: write options, column checks, and the task producer's batches and sequences.

The producer is driven with a recording stand-in for BrokerSession (this module's only double);
the wire behaviour is in tests/spark/test_minibroker_sink.py against a real broker.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from pipeline.client import MinibrokerError  # noqa: E402
from pipeline.options import WriteOptions  # noqa: E402
from pipeline.producer import TaskProducer  # noqa: E402
from pipeline.sink import SinkColumns, _headers  # noqa: E402
from protocol.records.record_batch import parse_batch  # noqa: E402

BASE = {"bootstrap.servers": "h:1"}


def test_idempotence_is_on_by_default_and_needs_acks_all() -> None:
    assert WriteOptions.parse(BASE).idempotent is True
    assert WriteOptions.parse(BASE | {"acks": "1"}).idempotent is False  # Kafka 3's default with acks=1
    assert WriteOptions.parse(BASE | {"kafka.enable.idempotence": "false"}).idempotent is False
    assert WriteOptions.parse(BASE | {"enable.idempotence": "TRUE", "acks": "all"}).idempotent is True
    with pytest.raises(MinibrokerError, match="enable.idempotence=true needs acks=all"):
        WriteOptions.parse(BASE | {"enable.idempotence": "true", "acks": "1"})
    with pytest.raises(MinibrokerError, match="enable.idempotence must be true or false"):
        WriteOptions.parse(BASE | {"enable.idempotence": "yes"})
    assert WriteOptions.parse(BASE | {"compression.type": "zstd"}).codec == 4


HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def schema(*fields: tuple[str, Any]) -> StructType:
    return StructType([StructField(n, t) for n, t in fields])


def test_columns_are_found_and_their_types_checked() -> None:
    opts = WriteOptions.parse(BASE | {"topic": "t"})
    cols = SinkColumns.of(schema(("partition", IntegerType()), ("value", StringType()), ("headers", HEADERS),
                                 ("key", BinaryType())), opts)
    assert (cols.value, cols.key, cols.topic, cols.partition, cols.headers) == (1, 3, None, 0, 2)
    no_topic = WriteOptions.parse(BASE)
    bad = [
        (schema(("key", StringType())), opts, "needs a 'value' column"),
        (schema(("value", IntegerType())), opts, "column 'value' must be string or binary, not int"),
        (schema(("value", StringType())), no_topic, "needs a 'topic' column"),
        (schema(("value", StringType()), ("topic", BinaryType())), no_topic, "column 'topic' must be string"),
        (schema(("value", StringType()), ("partition", StringType())), opts, "column 'partition' must be int"),
        (schema(("value", StringType()), ("headers", ArrayType(StringType()))), opts,
         "column 'headers' must be array<struct<key:string,value:binary>>, not array<string>"),
    ]
    for s, o, needle in bad:
        with pytest.raises(MinibrokerError, match=needle.replace("(", r"\(")):
            SinkColumns.of(s, o)


def test_header_cells_from_arrow_dicts_and_rows() -> None:
    from pyspark.sql import Row

    assert _headers(None) == () and _headers([]) == ()
    assert _headers([{"key": "a", "value": b"1"}, {"key": "a", "value": None}]) == [("a", b"1"), ("a", None)]
    assert _headers([Row(key="b", value=bytearray(b"2"))]) == [("b", b"2")]
    with pytest.raises(MinibrokerError, match="null key"):
        _headers([{"key": None, "value": b"x"}])


class RecordingSession:
    """Answers InitProducerId with a fixed id and keeps every batch handed to produce_batch."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bytes, int, bool]] = []

    def init_producer_id(self) -> tuple[int, int]:
        return 4242, 0

    def partitions(self, topic: str) -> list[int]:
        return [0, 1, 2]

    def produce_batch(self, topic: str, partition: int, batch: bytes, acks: int = -1, idempotent: bool = False) -> int:
        self.sent.append((topic, partition, batch, acks, idempotent))
        return 0


def header_of(batch: bytes) -> tuple[int, int, int, int]:
    """(producer id, epoch, base sequence, record count) of a RecordBatch v2."""
    import struct

    pid, epoch, seq, count = struct.unpack_from(">qhii", batch, 43)
    return pid, epoch, seq, count


def test_sequences_count_records_per_partition_and_batches_carry_the_producer_id() -> None:
    session = RecordingSession()
    producer = TaskProducer(session, acks=-1, codec=0, batch_bytes=200, idempotent=True,  # type: ignore[arg-type]
                            round_robin_start=0)
    for i in range(30):
        producer.add("t", i % 2, b"k", b"value-%02d" % i, [("h", b"%d" % i)], 1_000 + i)
    producer.flush_all()
    per_partition: dict[int, list[tuple[int, int, int, int]]] = {}
    for topic, partition, batch, acks, idempotent in session.sent:
        assert (topic, acks, idempotent) == ("t", -1, True)
        per_partition.setdefault(partition, []).append(header_of(batch))
    for headers in per_partition.values():
        assert len(headers) > 1  # batch.size 200 splits each partition's 15 records
        expected_seq = 0
        for pid, epoch, seq, count in headers:
            assert (pid, epoch, seq) == (4242, 0, expected_seq)
            expected_seq += count
        assert expected_seq == 15
    # The records keep their order, keys, values and headers.
    records = [r for _, p, b, _, _ in session.sent if p == 0 for r in parse_batch(memoryview(b), 0, strict=False)[0]]
    assert [r[3] for r in records] == [b"value-%02d" % i for i in range(0, 30, 2)]
    assert producer.appended.counts == {("t", 0): 15, ("t", 1): 15} and producer.appended.producer_id == 4242


def test_without_idempotence_batches_carry_no_producer_id() -> None:
    session = RecordingSession()
    producer = TaskProducer(session, acks=1, codec=0, batch_bytes=1 << 20, idempotent=False,  # type: ignore[arg-type]
                            round_robin_start=1)
    for _ in range(3):
        producer.add("t", producer.choose("t", None), None, b"v", (), 1)
    producer.flush_all()
    assert sorted(p for _, p, *_ in session.sent) == [0, 1, 2]  # round-robin from the task's own start
    assert {header_of(b)[:3] for _, _, b, _, _ in session.sent} == {(-1, -1, -1)}
