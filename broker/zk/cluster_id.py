"""The cluster id in `/cluster/id`, Kafka's layout: `{"version":"1","id":"<22 chars>"}`.

As Kafka's KafkaServer.getOrGenerateClusterId: read it, or create it with a fresh id (a random
UUID, URL-safe base64 without padding); when two brokers race, the one whose create loses reads
the winner's id. Metadata v2+ and DescribeCluster answer with it.
"""

from __future__ import annotations

import base64
import json
import uuid

from broker.zk.client import NodeExistsError, NoNodeError, ZkClient

CLUSTER_ID_PATH = "/cluster/id"


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def encode(cluster_id: str) -> bytes:
    return json.dumps({"version": "1", "id": cluster_id}, separators=(",", ":")).encode()


def decode(data: bytes | None) -> str:
    try:
        value = json.loads(data or b"")["id"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{CLUSTER_ID_PATH} does not hold Kafka's cluster id JSON") from None
    if not isinstance(value, str):
        raise ValueError(f"{CLUSTER_ID_PATH} does not hold Kafka's cluster id JSON")
    return value


async def get_or_create_cluster_id(zk: ZkClient) -> str:
    try:
        data, _ = await zk.get(CLUSTER_ID_PATH)
        return decode(data)
    except NoNodeError:
        pass
    try:
        await zk.create(CLUSTER_ID_PATH, encode(new_cluster_id()), make_parents=True)
    except NodeExistsError:
        pass
    data, _ = await zk.get(CLUSTER_ID_PATH)
    return decode(data)
