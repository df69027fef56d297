"""A partition's state znode as the controller wrote it, and the conditions the two-broker
truncation tests wait for (registrations, ISR, leader), read straight from ZooKeeper."""

from __future__ import annotations

import json
from typing import Any

from broker.zk.client import ZkClient


async def partition_state(zk: ZkClient, topic: str, partition: int = 0) -> dict[str, Any]:
    return json.loads((await zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state"))[0])


async def registered(zk: ZkClient, brokers: int) -> bool:
    """`brokers` brokers registered and a controller elected."""
    return len(await zk.get_children("/brokers/ids")) == brokers and bool(await zk.exists("/controller"))


async def isr_is(zk: ZkClient, topic: str, isr: list[int], partition: int = 0) -> bool:
    try:
        return sorted((await partition_state(zk, topic, partition))["isr"]) == isr
    except Exception:  # noqa: BLE001 - the state znode appears a moment after the topic
        return False


async def leader_is(zk: ZkClient, topic: str, leader: int, partition: int = 0) -> bool:
    return (await partition_state(zk, topic, partition))["leader"] == leader
