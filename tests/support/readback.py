"""Read a whole topic back with confluent-kafka (librdkafka), headers included."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

# (partition, offset, key, value, headers as a list of (key, value))
ReadRecord = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def read_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 120) -> list[ReadRecord]:
    """Every record of `topic` from the start of each partition to its end (as of the read)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "readback", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": "read_uncommitted"})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        got: list[ReadRecord] = []
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read {len(got)} records of {topic}; ends seen {sorted(at_end)}"
            for m in c.consume(1000, 1):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    if err.fatal():
                        raise KafkaException(err)
                    continue
                at_end.discard(m.partition())
                got.append((m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or [])))
        return got
    finally:
        c.close()
