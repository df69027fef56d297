"""The source's row layout: Spark's Kafka source columns, built as Arrow record batches.

The column names and types are those of Spark's Kafka source, so queries written for it run
unchanged. Rows leave `read()` as `pyarrow.RecordBatch`es rather than tuples: Spark then skips
its per-value Python conversion, which is most of the cost of a read.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from protocol.records.message_set import NO_TIMESTAMP, Record

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
# With includeHeaders, Spark's Kafka source adds this last column; null for a record without headers.
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"
SCHEMA_WITH_HEADERS_DDL = f"{SCHEMA_DDL}, {HEADERS_DDL}"
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

# What Spark expects back for SCHEMA_DDL (pyspark's to_arrow_schema with timezone UTC).
ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
])
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))

# Kafka's TimestampType ids as Spark's Kafka source reports them: CreateTime (0), LogAppendTime (1,
# a topic with message.timestamp.type=LogAppendTime, as its RecordBatch v2 says), -1 without a timestamp.
CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE = 0, 1, -1


def record_batch(topic: str, partition: int, records: Sequence[Record], headers: bool = False) -> pa.RecordBatch:
    """One Arrow batch of `records` (all from one topic partition) in the source's schema, with
    the `headers` column when asked for (includeHeaders)."""
    n = len(records)
    timestamps = [None if r.timestamp == NO_TIMESTAMP else r.timestamp * 1000 for r in records]
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array(timestamps, pa.timestamp("us", tz="UTC")),
        pa.array([NO_TIMESTAMP_TYPE if t is None else r.timestamp_type for t, r in zip(timestamps, records, strict=True)],
                 pa.int32()),
    ]
    if not headers:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    columns.append(pa.array([[{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in records],
                            HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_WITH_HEADERS)
