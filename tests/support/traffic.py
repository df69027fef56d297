"""Load from real clients (confluent-kafka): producers that fill or pace, and a consumer that records progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def produce_one(p: Producer, topic: str, value: bytes | None = None, poll: float = 0.05, **kwargs: Any) -> None:  # noqa: ANN401
    """`p.produce(topic, value, **kwargs)`, serving callbacks for `poll` seconds while the local queue is full."""
    while True:
        try:
            p.produce(topic, value, **kwargs)
            return
        except BufferError:
            p.poll(poll)


def produce_numbered(bootstrap: str, topic: str, count: int, value: Callable[[int], bytes], linger_ms: int,
                     batch_size: int) -> None:
    """value(0) .. value(count - 1) into partition 0 of `topic`, acks=all, no idempotence, all delivered."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms, "batch.size": batch_size,
                  "enable.idempotence": False})
    for i in range(count):
        produce_one(p, topic, value(i), partition=0)
    assert p.flush(120) == 0


def produce_bytes(bootstrap: str, topic: str, partitions: int, total: int, size: int = 1000,
                  flush_timeout: float = 120, on_progress: Callable[[int], None] | None = None,
                  **conf: object) -> None:
    """`total` bytes of `size`-byte values, round-robin over the partitions, as fast as the producer goes.

    `conf` overrides the producer's settings; `on_progress` is told the bytes produced every 200,000 messages.
    """
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 500_000,
                  "enable.idempotence": False, **conf})
    value = b"t" * size
    for i in range(total // size):
        produce_one(p, topic, value, partition=i % partitions)
        if on_progress is not None and i and i % 200_000 == 0:
            on_progress(i * size)
    assert p.flush(flush_timeout) == 0


def produce_messages(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes, int | None]],
                     **conf: object) -> list[tuple[int, int, bytes | None, bytes]]:
    """(key, value, partition or None) each, acks=all; (partition, offset, key, value) of each, all acknowledged."""
    delivered: list[tuple[int, int, bytes | None, bytes]] = []
    failures: list[str] = []

    def report(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            failures.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": False,
                  **conf})
    for key, value, partition in messages:
        kwargs = {} if partition is None else {"partition": partition}
        produce_one(p, topic, value, key=key, on_delivery=report, **kwargs)
        p.poll(0)
    assert p.flush(120) == 0
    assert failures == [], failures[:5]
    return delivered


@dataclass
class SteadyProducer:
    """1000-byte messages round-robin over the partitions at `rate` bytes/s until `stop` is set.

    Records the acknowledged (partition, offset) pairs, delivery errors, and when it started
    and stopped sending; `unflushed` is what was still unacknowledged after a 60 s flush.
    """

    bootstrap: str
    topic: str
    partitions: int
    rate: float
    acks: str = "1"
    stop: Any = field(default_factory=threading.Event)  # anything with is_set()
    acked: list[tuple[int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sent: int = 0
    started: float = 0.0
    stopped: float = 0.0
    flush_seconds: float = 0.0
    unflushed: int = 0

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": self.acks, "linger.ms": 5,
                      "enable.idempotence": False, "message.send.max.retries": 100})
        value = b"i" * 1000

        def ack(err, msg) -> None:  # noqa: ANN001
            if err is None:
                self.acked.append((msg.partition(), msg.offset()))
            else:
                self.errors.append(str(err))

        self.started = time.monotonic()
        while not self.stop.is_set():
            for i in range(50):
                p.produce(self.topic, value, partition=(self.sent + i) % self.partitions, on_delivery=ack)
            self.sent += 50
            p.poll(0)
            ahead = self.sent * 1000 / self.rate - (time.monotonic() - self.started)
            if ahead > 0:
                time.sleep(ahead)
        self.stopped = time.monotonic()
        self.unflushed = p.flush(60)
        self.flush_seconds = time.monotonic() - self.stopped


def steady_producer(bootstrap: str, topic: str, partitions: int, rate: float, stop: Any,  # noqa: ANN401
                    acked: list[tuple[int, int]] | None = None, acks: str = "1") -> None:
    """SteadyProducer until `stop`; acknowledged offsets go to `acked`, and all must be flushed."""
    producer = SteadyProducer(bootstrap, topic, partitions, rate, acks, stop,
                              acked if acked is not None else [])
    producer.run()
    assert producer.unflushed == 0


def paced_producer(bootstrap: str, client_id: str, topic: str, rate: float, seconds: float,
                   stop: threading.Event) -> None:
    """A confluent-kafka producer offering `rate` B/s of 1 KB messages for `seconds`."""
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": "1", "linger.ms": 5,
                  "batch.size": 16384, "enable.idempotence": False})
    value = b"p" * 1000
    start = time.monotonic()
    sent = 0
    while not stop.is_set() and time.monotonic() - start < seconds:
        due = (time.monotonic() - start) * rate
        while sent < due:
            produce_one(p, topic, value, 0.01)
            sent += len(value)
        p.poll(0.01)
    p.flush(0)  # whatever is still queued is the throttled excess; not waited for


def consume_for(bootstrap: str, client_id: str, topic: str, seconds: float, marks: list[tuple[float, int]],
                **conf: object) -> None:
    """Partition 0 of `topic` from the start for `seconds`; (seconds since start, value bytes so far) into `marks`.

    `conf` adds consumer settings (security, for one)."""
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"g-{client_id}",
                  "enable.auto.commit": False, "fetch.max.bytes": 1_000_000, "max.partition.fetch.bytes": 65536,
                  **conf})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    got += len(m.value())
            marks.append((time.monotonic() - start, got))
    finally:
        c.close()


def read_partition(bootstrap: str, topic: str, partition: int, end: int, timeout: float = 120) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of one partition from the start up to offset `end` - 1 (an
    offset, not a count: retries without idempotence may have written a batch twice)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "assign-only", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(1000, 1):
                if m.error():
                    if m.error().fatal():
                        raise KafkaException(m.error())
                    continue
                got.append((m.offset(), m.value()))
        return got
    finally:
        c.close()
