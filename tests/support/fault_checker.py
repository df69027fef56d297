"""The fault suite's checker: every acknowledged write, and every replica read back at the end.

`AckRecorder` produces unique values at a steady rate with acks=all (confluent-kafka, retries
on, no idempotence) and records each acknowledgement as (partition, offset, value) with its
time. `read_replica` reads one partition from one broker with Kafka's debugging replica id (-2,
which a follower serves too) up to its high watermark. `verdict` compares: an acknowledged
value missing from its acknowledged offset on any replica is lost; a value found at more than
one offset is duplicated (retries without idempotence may write a batch twice: counted, not a
failure). The longest unavailability is the longest gap between acknowledgements on one partition.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Producer

from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.records.records import decode_records

DEBUG_REPLICA_ID = -2


@dataclass
class AckRecorder:
    bootstrap: str
    topic: str
    partitions: int
    rate: float = 200.0  # messages per second
    acked: list[tuple[int, int, bytes]] = field(default_factory=list)
    ack_times: list[tuple[int, float]] = field(default_factory=list)  # (partition, when)
    failed: list[str] = field(default_factory=list)
    sent: int = 0
    unflushed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> AckRecorder:
        self._thread = threading.Thread(target=self._run, name=f"acks-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def wait_acks(self, n: int, timeout: float = 60) -> None:
        """Until `n` more writes are acknowledged than now (the cluster serves again)."""
        target = len(self.acked) + n
        deadline = time.monotonic() + timeout
        while len(self.acked) < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.acked)} of {target} acknowledged after {timeout}s: {self.failed[-3:]}")
            time.sleep(0.1)

    def stop(self, flush_s: float = 120) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(flush_s + 30)

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                      "enable.idempotence": False, "retries": 1000, "retry.backoff.ms": 200,
                      "request.timeout.ms": 10000, "message.timeout.ms": 180000,
                      "topic.metadata.refresh.interval.ms": 2000})

        def delivered(err, msg) -> None:  # noqa: ANN001
            if err is None:
                with self._lock:
                    self.acked.append((msg.partition(), msg.offset(), msg.value()))
                    self.ack_times.append((msg.partition(), time.monotonic()))
            else:
                self.failed.append(str(err))

        started = time.monotonic()
        while not self._stop.is_set():
            value = b"%s-%09d" % (self.topic.encode(), self.sent)
            p.produce(self.topic, value, partition=self.sent % self.partitions, on_delivery=delivered)
            self.sent += 1
            p.poll(0)
            ahead = self.sent / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        self.unflushed = p.flush(180)

    def longest_gap(self) -> float:
        """The longest time any one partition went without an acknowledgement: its unavailability
        (the others, led elsewhere, keep acknowledging meanwhile)."""
        longest = 0.0
        for partition in range(self.partitions):
            times = sorted(t for p, t in self.ack_times if p == partition)
            longest = max([longest, *(b - a for a, b in zip(times, times[1:], strict=False))])
        return longest


async def read_replica(host: str, port: int, topic: str, partition: int, timeout: float = 30) -> dict[int, bytes]:
    """offset → value of one replica's copy, up to its high watermark."""
    out: dict[int, bytes] = {}
    offset = 0
    deadline = time.monotonic() + timeout
    async with await KafkaConnection.open(host, port, "fault-checker", 10) as conn:
        while True:
            body = {"replica_id": DEBUG_REPLICA_ID, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 4 << 20,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 4 << 20}]}]}
            resp = await conn.request(ApiKey.FETCH, 3, body)
            part = resp["responses"][0]["partitions"][0]
            if part["error_code"] != 0:
                raise RuntimeError(f"{host}:{port} {topic}-{partition}: error {part['error_code']}")
            records = decode_records(part["records"])
            for rec in records:
                if rec.offset >= offset:
                    out[rec.offset] = bytes(rec.value or b"")
            if records:
                offset = max(offset, records[-1].offset + 1)
            if offset >= part["high_watermark"] or time.monotonic() > deadline:
                return out


@dataclass
class Verdict:
    fault: str
    acknowledged: int
    lost: list[tuple[int, int, int]]  # (broker, partition, offset)
    duplicated: int
    longest_unavailability: float
    failed: int

    def row(self) -> str:
        return (f"{self.fault:<28} {self.acknowledged:>12} {len(self.lost):>6} {self.duplicated:>11} "
                f"{self.longest_unavailability:>20.1f} s")


TABLE_HEAD = f"{'fault':<28} {'acknowledged':>12} {'lost':>6} {'duplicated':>11} {'longest unavailable':>22}"


async def verdict(fault: str, recorder: AckRecorder, addresses: dict[int, tuple[str, int]],
                  settle_s: float = 90) -> Verdict:
    """Reads every partition from every broker, retrying while a replica is still catching up."""
    deadline = time.monotonic() + settle_s
    while True:
        lost: list[tuple[int, int, int]] = []
        duplicated = 0
        for broker, (host, port) in sorted(addresses.items()):
            copies = {}
            for partition in range(recorder.partitions):
                try:
                    copies[partition] = await read_replica(host, port, recorder.topic, partition)
                except (OSError, RuntimeError, TimeoutError):
                    copies[partition] = {}
            lost += [(broker, p, o) for p, o, v in recorder.acked if copies[p].get(o) != v]
            if broker == min(addresses):
                seen: dict[bytes, int] = {}
                for log in copies.values():
                    for v in log.values():
                        seen[v] = seen.get(v, 0) + 1
                duplicated = sum(n - 1 for n in seen.values() if n > 1)
        if not lost or time.monotonic() > deadline:
            return Verdict(fault, len(recorder.acked), lost, duplicated, recorder.longest_gap(), len(recorder.failed))
        await asyncio.sleep(2)


async def partition_state(host: str, port: int, topic: str, partition: int) -> tuple[int, list[int]]:
    """(leader, isr) of a partition as the broker at host:port reports it in Metadata."""
    async with await KafkaConnection.open(host, port, "fault-checker", 10) as conn:
        md = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": topic}]}, 10)
    part = next(p for p in md["topics"][0]["partitions"] if p["partition_index"] == partition)
    return part["leader_id"], sorted(part["isr_nodes"])


async def wait_state(addresses: list[tuple[str, int]], topic: str, partitions: int, what: str,
                     check: object, timeout: float = 90) -> None:
    """Until `check(leader, isr)` holds for every partition as one of `addresses` reports it."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        for host, port in addresses:
            try:
                states = [await partition_state(host, port, topic, p) for p in range(partitions)]
            except (OSError, TimeoutError, ConnectionError, StopIteration, IndexError, KeyError) as e:
                last = e
                continue
            last = states
            if all(check(leader, isr) for leader, isr in states):  # type: ignore[operator]
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout}s; last seen {last}")
        await asyncio.sleep(1)
