"""Replicas on disk and KIP-73 replication throttles: log bytes, throttle settings, catch-up sampling."""

from __future__ import annotations

import asyncio
import time

from tests.support.brokers import BrokerProcess
from tests.support.tools import configs

MB = 1_000_000


def log_bytes(broker: BrokerProcess, topic: str) -> int:
    """Size on disk of the broker's *.log segments of every partition of `topic`."""
    return sum(f.stat().st_size for f in broker.log_dir.glob(f"{topic}-*/*.log"))


def partition_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """The bytes of the broker's replica of one partition, its segments in order.

    A live broker's cleaner or retention may swap or delete a segment between the listing and its
    read (CI read a compacted-away segment's name, then found no file): the listing is taken again."""
    d = broker.log_dir / f"{topic}-{partition}"
    for _ in range(20):
        try:
            return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))
        except FileNotFoundError:
            time.sleep(0.05)
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def throttle_all_replicas(zk: str, topic: str) -> None:
    """Every replica of `topic` on the leader and follower throttle lists (`*`)."""
    r = configs(zk, "--entity-type", "topics", "--entity-name", topic, "--alter", "--add-config",
                "leader.replication.throttled.replicas=*,follower.replication.throttled.replicas=*")
    assert r.returncode == 0, r.stderr


def set_throttle_rate(zk: str, rate: int) -> None:
    """Leader and follower throttled rate on the brokers' default entity."""
    r = configs(zk, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config",
                f"leader.replication.throttled.rate={rate},follower.replication.throttled.rate={rate}")
    assert r.returncode == 0, r.stderr


def set_throttle(zk: str, topic: str, rate: int) -> None:
    throttle_all_replicas(zk, topic)
    set_throttle_rate(zk, rate)


async def sample_catch_up(broker: BrokerProcess, topic: str, target: int,
                          timeout: float) -> list[tuple[float, int]]:
    """(time, bytes on disk) of `broker`'s replicas of `topic`, every 0.25 s until `target` bytes."""
    samples = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        size = log_bytes(broker, topic)
        samples.append((time.monotonic(), size))
        if size >= target:
            return samples
        await asyncio.sleep(0.25)
    raise AssertionError(f"catch-up incomplete: {samples[-1][1]} of {target} bytes")


def mean_rate(samples: list[tuple[float, int]]) -> float:
    """Bytes/s from the sample before the first growth to the last sample."""
    start = next(i for i, (_, b) in enumerate(samples) if b > samples[0][1])
    t0, b0 = samples[start - 1]
    t1, b1 = samples[-1]
    return (b1 - b0) / (t1 - t0)


def rate_profile(samples: list[tuple[float, int]], step: float = 2.0) -> str:
    """MB/s over successive `step`-second spans, to show where a mean fell short."""
    out, (t0, b0) = [], samples[0]
    for t, b in samples[1:]:
        if t - t0 >= step:
            out.append(f"{(b - b0) / (t - t0) / MB:.2f}")
            t0, b0 = t, b
    return " ".join(out)
