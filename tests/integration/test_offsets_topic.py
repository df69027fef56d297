"""`__consumer_offsets` and FindCoordinator on real brokers (issue 18, deliverable 2).

- FindCoordinator from kafka-python's admin client (its own request, v0-3 as it picks) and from
  the project's wire client at each version 0-3: COORDINATOR_NOT_AVAILABLE until the topic it
  creates has a leader for the group's partition, then that leader (Kafka's partitionFor, as
  the ZooKeeper state znode names it), at its address; TRANSACTION keys: no coordinator;
  an unknown key type: INVALID_REQUEST.
- The topic is created internal: 50 partitions, RF min(3, brokers) (a warning with fewer),
  cleanup.policy=compact and segment.bytes from offsets.topic.segment.bytes in its config znode;
  Metadata flags it is_internal.
- A Metadata request naming it creates it only as the internal topic; ordinary produce to it is
  INVALID_TOPIC_EXCEPTION and DeleteTopics of it too; nothing is appended or deleted (produce
  with Kafka's admin client id `__admin_client` is appended, as in Kafka).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from kafka.admin import KafkaAdminClient

from broker.group.store import OFFSETS_TOPIC, partition_for
from broker.zk.client import ZkClient
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.topic import GROUP_METADATA_TOPIC_NAME
from tests.support.brokers import BrokerProcess
from tests.support.cluster import Cluster
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration

PARTITIONS = 50


def test_one_name() -> None:
    assert OFFSETS_TOPIC == GROUP_METADATA_TOPIC_NAME


async def find_coordinator(target: Cluster | BrokerProcess | str, key: str, version: int = 3,
                           key_type: int = 0) -> dict:
    conn = await connect(target)
    try:
        body: dict = {"key": key, "key_type": key_type}
        return await conn.request(ApiKey.FIND_COORDINATOR, version, body)
    finally:
        await conn.close()


async def coordinator_of(cluster: Cluster, group: str, version: int = 3) -> dict:
    """The answer once it names a coordinator (COORDINATOR_NOT_AVAILABLE meanwhile, nothing else)."""
    async def found() -> dict | None:
        resp = await find_coordinator(cluster, group, version)
        assert resp["error_code"] in (ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE), resp
        if resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE:
            assert resp["node_id"] == -1
            return None
        return resp
    return await wait_for(f"a coordinator for {group}", found, timeout=60, interval=0.3)


async def test_find_coordinator_creates_the_internal_topic(cluster: Cluster) -> None:
    first = await find_coordinator(cluster, "g1")
    assert first["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (first["node_id"], first["host"], first["port"]) == (-1, "", -1)
    for version in range(4):
        resp = await coordinator_of(cluster, "g1", version)
        state = await cluster.state(OFFSETS_TOPIC, partition_for("g1", PARTITIONS))
        assert resp["node_id"] == state["leader"]
        leader = cluster.by_id(resp["node_id"])
        assert (resp["host"], resp["port"]) == ("127.0.0.1", leader.port)
        if version >= 1:
            assert resp["error_message"] == "NONE"
    # Many groups spread over the partitions' leaders, each as ZooKeeper says.
    for group in ("a", "group-b", "consumer-group-ü", ""):
        resp = await coordinator_of(cluster, group)
        state = await cluster.state(OFFSETS_TOPIC, partition_for(group, PARTITIONS))
        assert resp["node_id"] == state["leader"]

    # The topic: internal, 50 partitions, RF 3, compacted, with the offsets segment size.
    data, _ = await cluster.zk.get(f"/brokers/topics/{OFFSETS_TOPIC}")
    assignment = json.loads(data)["partitions"]
    assert len(assignment) == PARTITIONS
    assert all(len(set(r)) == 3 for r in assignment.values())
    data, _ = await cluster.zk.get(f"/config/topics/{OFFSETS_TOPIC}")
    config = json.loads(data)["config"]
    assert config == {"cleanup.policy": "compact", "segment.bytes": "104857600", "compression.type": "producer"}
    conn = await connect(cluster)
    try:
        md = await conn.request(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                                     "include_cluster_authorized_operations": False,
                                                     "include_topic_authorized_operations": False})
    finally:
        await conn.close()
    topic = next(t for t in md["topics"] if t["name"] == OFFSETS_TOPIC)
    assert topic["is_internal"] is True
    assert len(topic["partitions"]) == PARTITIONS


async def test_transaction_and_unknown_key_types(cluster: Cluster) -> None:
    for version in (1, 2, 3):
        resp = await find_coordinator(cluster, "txn-1", version, key_type=1)
        assert resp["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert "no transaction coordinator" in resp["error_message"]
        resp = await find_coordinator(cluster, "x", version, key_type=7)
        assert resp["error_code"] == ErrorCode.INVALID_REQUEST
    conn = await connect(cluster)
    try:
        md = await conn.request(ApiKey.METADATA, 4, {"topics": [{"name": "__transaction_state"}],
                                                     "allow_auto_topic_creation": True})
    finally:
        await conn.close()
    assert md["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert md["topics"][0]["is_internal"] is True
    assert not await cluster.zk.exists("/brokers/topics/__transaction_state")
    assert not await cluster.zk.exists(f"/brokers/topics/{OFFSETS_TOPIC}")  # transactions created nothing


async def test_kafka_python_finds_the_coordinator(cluster: Cluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    try:
        async def node() -> tuple[int] | None:  # a tuple: broker 0 is an answer, not a falsy "not yet"
            try:
                node_id: int = admin._manager.run(admin._find_coordinator_id, "kp-group")
            except Exception as e:  # COORDINATOR_NOT_AVAILABLE until the topic has leaders
                assert "CoordinatorNotAvailable" in type(e).__name__, repr(e)
                return None
            return (node_id,)
        (found,) = await wait_for("kafka-python's coordinator", node, timeout=60, interval=0.5)
    finally:
        admin.close()
    state = await cluster.state(OFFSETS_TOPIC, partition_for("kp-group", PARTITIONS))
    assert found == state["leader"]


async def test_metadata_creates_it_only_as_the_internal_topic(cluster: Cluster) -> None:
    conn = await connect(cluster)
    try:
        md = await conn.request(ApiKey.METADATA, 4, {"topics": [{"name": OFFSETS_TOPIC}],
                                                     "allow_auto_topic_creation": True})
        assert md["topics"][0]["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
        assert md["topics"][0]["is_internal"] is True
    finally:
        await conn.close()
    data, _ = await cluster.zk.get(f"/brokers/topics/{OFFSETS_TOPIC}")
    assert len(json.loads(data)["partitions"]) == PARTITIONS  # not num.partitions=1
    data, _ = await cluster.zk.get(f"/config/topics/{OFFSETS_TOPIC}")
    assert json.loads(data)["config"]["cleanup.policy"] == "compact"


async def test_real_clients_see_it_internal(cluster: Cluster) -> None:
    """A monitoring tool's path (issue 18): confluent-kafka asks for the topic's metadata by name,
    which creates it, as the internal topic; confluent-kafka's admin describes it internal and
    kafka-python's consumer leaves it out of its topic list, by the flag."""
    from confluent_kafka import Producer, TopicCollection
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    producer = Producer({"bootstrap.servers": cluster.bootstrap})

    async def partitions() -> int | None:
        md = await asyncio.to_thread(producer.list_topics, OFFSETS_TOPIC, 10)
        topic = md.topics[OFFSETS_TOPIC]
        return len(topic.partitions) if topic.error is None and topic.partitions else None
    assert await wait_for("confluent-kafka sees its partitions", partitions, timeout=60, interval=0.5) == PARTITIONS
    data, _ = await cluster.zk.get(f"/config/topics/{OFFSETS_TOPIC}")
    assert json.loads(data)["config"]["cleanup.policy"] == "compact"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.describe_topics(TopicCollection([OFFSETS_TOPIC]), request_timeout=20)
    description = await asyncio.to_thread(futures[OFFSETS_TOPIC].result, 30)
    assert description.is_internal is True
    assert len(description.partitions) == PARTITIONS
    # kafka-python's consumer lists every topic but those Metadata flags is_internal.
    await cluster.create_topic("plain")
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
    try:
        topics = await asyncio.to_thread(consumer.topics)
    finally:
        await asyncio.to_thread(consumer.close)
    assert "plain" in topics
    assert OFFSETS_TOPIC not in topics


async def test_produce_and_delete_refused(cluster: Cluster) -> None:
    await coordinator_of(cluster, "g")  # created, with leaders
    state = await cluster.state(OFFSETS_TOPIC, 0)
    leader = cluster.by_id(state["leader"])
    conn = await connect(leader)
    try:
        resp = await produce(conn, OFFSETS_TOPIC, 0, [(b"k", b"v")], acks=-1)
        assert resp["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        listed = await conn.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
            {"name": OFFSETS_TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert listed["topics"][0]["partitions"][0]["offset"] == 0  # nothing appended
        deleted = await conn.request(ApiKey.DELETE_TOPICS, 4, {"topic_names": [OFFSETS_TOPIC], "timeout_ms": 5000})
        assert deleted["responses"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    finally:
        await conn.close()
    assert await cluster.zk.exists(f"/brokers/topics/{OFFSETS_TOPIC}")
    assert not await cluster.zk.exists(f"/admin/delete_topics/{OFFSETS_TOPIC}")
    # As in Kafka 2.8, the admin client id (AdminUtils.AdminClientId) may append to it.
    admin = await connect(leader, client_id="__admin_client")
    try:
        resp = await produce(admin, OFFSETS_TOPIC, 0, [(b"k", b"v")], acks=-1)
        assert (resp["error_code"], resp["base_offset"]) == (ErrorCode.NONE, 0)
    finally:
        await admin.close()
    out = cluster.topics("--delete", "--topic", OFFSETS_TOPIC, check=False)
    assert out.returncode != 0
    assert "internal topic" in out.stdout + out.stderr


async def test_an_existing_topic_keeps_its_partition_count(cluster: Cluster) -> None:
    """Created by someone else first (as an earlier release's Metadata auto-creation did, or
    CreateTopics, which Kafka 2.8 allows for it): its partition count decides, as in Kafka."""
    await cluster.create_topic(OFFSETS_TOPIC, partitions=3, rf=2)
    for group in ("a", "b", "c", "group-d"):
        resp = await coordinator_of(cluster, group)
        state = await cluster.state(OFFSETS_TOPIC, partition_for(group, 3))
        assert resp["node_id"] == state["leader"]
    data, _ = await cluster.zk.get(f"/brokers/topics/{OFFSETS_TOPIC}")
    assert len(json.loads(data)["partitions"]) == 3


async def test_replication_factor_lowered_to_live_brokers(broker_factory, zk_server) -> None:  # noqa: ANN001
    brokers = [broker_factory(i) for i in range(2)]

    async def found() -> dict | None:
        resp = await find_coordinator(brokers[0], "g")
        return resp if resp["error_code"] == ErrorCode.NONE else None
    await wait_for("a coordinator", found, timeout=60, interval=0.3)
    zk = ZkClient(zk_server.connect_string, 6000)
    await zk.start()
    try:
        data, _ = await zk.get(f"/brokers/topics/{OFFSETS_TOPIC}")
    finally:
        await zk.close()
    assignment = json.loads(data)["partitions"]
    assert len(assignment) == PARTITIONS
    assert {len(set(r)) for r in assignment.values()} == {2}
    logs = "".join(b.log_path.read_text() for b in brokers)
    assert "internal_topic.replication_factor_lowered" in logs
