"""Three real broker processes on one real ZooKeeper, and the ZooKeeper-side view tests check against."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.zk.client import NoNodeError, ZkClient
from tests.support.brokers import ROOT, BrokerProcess, free_port

# Short timings keep the ISR scenarios quick; the semantics are Kafka's, only the constants shrink.
FAST = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "zookeeper.session.timeout.ms": "6000",
    "replication.throttle.leftover.warn.ms": "3000",
}


async def wait_for(what: str, check, timeout: float = 30.0, interval: float = 0.1):  # noqa: ANN001, ANN201
    """Polls the async `check` until it returns something truthy (a missing znode counts as not yet)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except NoNodeError:
            last = None
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


class Cluster:
    def __init__(self, brokers: list[BrokerProcess], zk: ZkClient) -> None:
        self.brokers = brokers
        self.zk = zk

    def by_id(self, broker_id: int) -> BrokerProcess:
        return next(b for b in self.brokers if b.broker_id == broker_id)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.proc and b.proc.poll() is None)

    def topics(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "broker", "topics", "--bootstrap-server", self.bootstrap,
                               *args], cwd=str(ROOT), capture_output=True, text=True, timeout=90, check=check)

    def create_topic(self, name: str, partitions: int, rf: int, *configs: str) -> None:
        extra = [a for c in configs for a in ("--config", c)]
        self.topics("--create", "--topic", name, "--partitions", str(partitions),
                    "--replication-factor", str(rf), *extra)

    async def state(self, topic: str, partition: int) -> dict:
        data, _ = await self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data)

    async def controller(self) -> int:
        data, _ = await self.zk.get("/controller")
        return int(json.loads(data)["brokerid"])

    async def wait_for(self, what: str, check, timeout: float = 30.0, interval: float = 0.1):  # noqa: ANN001, ANN201
        return await wait_for(what, check, timeout, interval)

    async def wait_isr(self, topic: str, partition: int, isr: set[int], timeout: float = 30.0) -> dict:
        async def check() -> dict | None:
            st = await self.state(topic, partition)
            return st if set(st["isr"]) == isr else None
        return await self.wait_for(f"ISR {sorted(isr)} of {topic}-{partition}", check, timeout)


def metric(broker: BrokerProcess, name: str, **labels: str) -> float:
    """One sample from the broker's Prometheus endpoint (summed over series matching the labels)."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=5).read().decode()
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(f"minibroker_{name}"):
            continue
        head, _, value = line.rpartition(" ")
        series = head[len(f"minibroker_{name}"):]
        if series and not series.startswith("{"):
            continue
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
            found = True
    if not found:
        raise KeyError(name)
    return total


def configs(zk_connect: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", "configs", "--zookeeper", zk_connect, *args],
                          cwd=str(ROOT), capture_output=True, text=True, timeout=60)


def partition_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    d = broker.log_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


async def wait_identical_replicas(cluster: Cluster, topic: str, partition: int, replicas: list[int],
                                  timeout: float = 60.0) -> bytes:
    async def check() -> bytes | None:
        blobs = [partition_bytes(cluster.by_id(r), topic, partition) for r in replicas]
        return blobs[0] if blobs[0] and all(b == blobs[0] for b in blobs) else None
    return await cluster.wait_for(f"identical replicas of {topic}-{partition}", check, timeout, interval=0.5)


@pytest.fixture
async def cluster(tmp_path: Path, zk_server) -> AsyncIterator[Cluster]:  # noqa: ANN001
    brokers = []
    for i in range(3):
        mport = free_port()
        b = BrokerProcess(tmp_path, i, zk_server.connect_string,
                          {**FAST, "metrics.listener": f"http://127.0.0.1:{mport}"})
        b.metrics_url = f"http://127.0.0.1:{mport}/metrics"
        brokers.append(b)
    for b in brokers:
        b.start(wait=False)
    for b in brokers:
        b.wait_ready()
    zk = ZkClient(zk_server.connect_string, 6000)
    await zk.start()
    c = Cluster(brokers, zk)
    await c.wait_for("3 registered brokers", lambda: _registered(zk, 3))
    try:
        yield c
    finally:
        await zk.close()
        for b in brokers:
            b.kill()


async def _registered(zk: ZkClient, n: int) -> bool:
    return len(await zk.get_children("/brokers/ids")) == n and await zk.exists("/controller")
