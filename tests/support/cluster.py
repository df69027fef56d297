"""Three real broker processes on one real ZooKeeper, and the ZooKeeper-side view tests check against."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from broker.zk.client import ZkClient
from tests.support.brokers import BrokerProcess, start_together
from tests.support.replication import partition_bytes
from tests.support.tools import topics
from tests.support.topics import create_topic
from tests.support.waiting import wait_for

# Short timings keep the ISR scenarios quick; the semantics are Kafka's, only the constants shrink.
FAST = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "zookeeper.session.timeout.ms": "6000",
    "replication.throttle.leftover.warn.ms": "3000",
}


class Cluster:
    def __init__(self, brokers: list[BrokerProcess], zk: ZkClient) -> None:
        self.brokers = brokers
        self.zk = zk

    @classmethod
    async def start(cls, workdir: Path, zk_connect: str, size: int = 3,
                    overrides: dict[str, str] | None = None) -> Cluster:
        """`size` brokers with FAST timings (and `overrides`) and metrics, started together; ready once
        all are registered."""
        brokers = [BrokerProcess(workdir, i, zk_connect, FAST | (overrides or {}), metrics=True) for i in range(size)]
        try:
            start_together(brokers)
            zk = ZkClient(zk_connect, 6000)
            await zk.start()
        except BaseException:
            for b in brokers:
                b.kill()
            raise
        c = cls(brokers, zk)
        try:
            await c.wait_for(f"{size} registered brokers", lambda: _registered(zk, size))
        except BaseException:
            await c.close()
            raise
        return c

    async def close(self) -> None:
        await self.zk.close()
        for b in self.brokers:
            b.kill()

    def by_id(self, broker_id: int) -> BrokerProcess:
        return next(b for b in self.brokers if b.broker_id == broker_id)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.proc and b.proc.poll() is None)

    def topics(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`minibroker topics` against the live brokers."""
        return topics(self.bootstrap, *args, check=check)

    async def create_topic(self, name: str, partitions: int = 1, rf: int = 1, **options: Any) -> dict:  # noqa: ANN401
        """`tests.support.topics.create_topic` on the first reachable live broker."""
        return await create_topic(self.bootstrap, name, partitions, rf, **options)

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


async def wait_identical_replicas(cluster: Cluster, topic: str, partition: int, replicas: list[int],
                                  timeout: float = 60.0) -> bytes:
    async def check() -> bytes | None:
        blobs = [partition_bytes(cluster.by_id(r), topic, partition) for r in replicas]
        return blobs[0] if blobs[0] and all(b == blobs[0] for b in blobs) else None
    return await cluster.wait_for(f"identical replicas of {topic}-{partition}", check, timeout, interval=0.5)


async def _registered(zk: ZkClient, n: int) -> bool:
    return len(await zk.get_children("/brokers/ids")) == n and await zk.exists("/controller")
