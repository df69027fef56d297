"""One write task's producer: records gathered per partition into RecordBatch v2, sent in order.

Idempotence (the default) is Kafka's idempotent producer: the task attempt asks any broker for
a producer id (InitProducerId), and each batch it sends to a partition carries that id, its
epoch and the partition's next sequence number. A batch sent again because its answer was lost
(a dropped connection, a timeout, a leader change) has the same id and sequence, so the leader
answers with the offsets it gave the first time and appends nothing. One batch per partition is
in flight at a time, so sequences arrive in order.

A new task attempt gets a new producer id: what an earlier, failed attempt of the same task
appended stays, and the new attempt appends its rows again (see docs/pyspark.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.client import BrokerSession
from pipeline.partitioner import RoundRobin, partition_for_key
from protocol.records.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Header,
    RecordSpec,
    build_batch,
)

# Bytes a record adds to a batch besides its key, value and headers (length, attributes,
# deltas and the varint lengths, at most): enough to decide when a batch is full.
_RECORD_OVERHEAD = 21
_SEQUENCE_WRAP = 2**31  # Kafka's sequence is an int32 that wraps to 0 after Integer.MAX_VALUE


@dataclass
class Appended:
    """What one task appended: records per (topic, partition), and the producer id it used."""

    producer_id: int = NO_PRODUCER_ID
    counts: dict[tuple[str, int], int] = field(default_factory=dict)


class TaskProducer:
    """Gathers one task's records per (topic, partition) and produces them as RecordBatch v2."""

    def __init__(self, session: BrokerSession, acks: int, codec: int, batch_bytes: int, idempotent: bool,
                 round_robin_start: int) -> None:
        self.session = session
        self.acks = acks
        self.codec = codec
        self.batch_bytes = batch_bytes
        self.idempotent = idempotent
        self.robin = RoundRobin(round_robin_start)
        self.appended = Appended()
        self.epoch = NO_PRODUCER_EPOCH
        if idempotent:
            self.appended.producer_id, self.epoch = session.init_producer_id()
        self._sequences: dict[tuple[str, int], int] = {}
        self._partition_counts: dict[str, int] = {}
        self._pending: dict[tuple[str, int], list[RecordSpec]] = {}
        self._pending_bytes: dict[tuple[str, int], int] = {}

    def partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            count = self._partition_counts[topic] = len(self.session.partitions(topic))
        return count

    def choose(self, topic: str, key: bytes | None) -> int:
        """The default partitioner's choice: murmur2 of the key, else round-robin."""
        count = self.partition_count(topic)
        return partition_for_key(key, count) if key is not None else self.robin.choose(count)

    def add(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
            headers: Sequence[Header], timestamp_ms: int) -> None:
        tp = (topic, partition)
        self._pending.setdefault(tp, []).append((timestamp_ms, key, value, headers))
        size = self._pending_bytes.get(tp, 0) + _RECORD_OVERHEAD + len(key or b"") + len(value or b"")
        for hk, hv in headers:
            size += len(hk) + len(hv or b"") + 10
        self._pending_bytes[tp] = size
        if size >= self.batch_bytes:
            self.flush(tp)

    def flush(self, tp: tuple[str, int]) -> None:
        records = self._pending.pop(tp, None)
        self._pending_bytes.pop(tp, None)
        if not records:
            return
        sequence = self._sequences.get(tp, 0) if self.idempotent else NO_SEQUENCE
        batch = build_batch(records, codec=self.codec, producer_id=self.appended.producer_id,
                            producer_epoch=self.epoch, base_sequence=sequence)
        self.session.produce_batch(tp[0], tp[1], batch, acks=self.acks, idempotent=self.idempotent)
        if self.idempotent:
            self._sequences[tp] = (sequence + len(records)) % _SEQUENCE_WRAP
        self.appended.counts[tp] = self.appended.counts.get(tp, 0) + len(records)

    def flush_all(self) -> None:
        for tp in list(self._pending):
            self.flush(tp)


def now_ms() -> int:
    return int(time.time() * 1000)
