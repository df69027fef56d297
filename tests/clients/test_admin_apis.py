"""The admin APIs of Kafka 2.8's table through real admin clients: confluent-kafka's AdminClient,
kafka-python's KafkaAdminClient and KafkaJS's admin, against one broker on a real ZooKeeper.

Config changes are checked where the rest of the system sees them: the entity znode and its change
notification in ZooKeeper, and the broker applying a throttle rate through its config watch (its
Prometheus gauge).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from broker.zk.server import ZooKeeperServer
from protocol.api_keys import ApiKey
from tests.support.brokers import BrokerProcess
from tests.support.metrics import metric
from tests.support.waiting import wait_for
from tests.support.wire import connect
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.clients
NODE_DIR = Path(__file__).parent / "node"


class AdminBroker(BrokerProcess):
    chroot: str
    zk: ZooKeeperServer


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[AdminBroker]:
    workdir = tmp_path_factory.mktemp("admin")
    b = AdminBroker(workdir, 0, zk_server_session.connect_string + f"/{workdir.name}",
                    {"auto.create.topics.enable": "false", "log.segment.bytes": "2000000"}, metrics=True)
    b.chroot, b.zk = f"/{workdir.name}", zk_server_session
    b.start()
    asyncio.run(_metadata_ready(b))
    yield b
    assert b.stop() == 0, b.log()


async def _metadata_ready(b: AdminBroker) -> None:
    """Until the controller's first UpdateMetadata, Metadata lists no broker and no controller (as
    Kafka's does), and librdkafka's admin calls then wait out their whole timeout for a controller."""
    async with await connect(b.bootstrap) as conn:
        async def ready() -> bool:
            md = await conn.request(ApiKey.METADATA, 1, {"topics": []})
            return md["controller_id"] == 0 and len(md["brokers"]) == 1
        await wait_for("the broker's first UpdateMetadata", ready, timeout=30)


async def request(b: AdminBroker, key: ApiKey, version: int, body: dict) -> dict:
    async with await connect(b.bootstrap) as conn:
        return await conn.request(key, version, body)


def znode(b: AdminBroker, path: str) -> dict | None:
    async def read() -> dict | None:
        async with zk_connect(b.zk, chroot=b.chroot) as zk:
            if not await zk.exists(path):
                return None
            data, _ = await zk.get(path)
            return json.loads(data)
    return asyncio.run(read())


def notifications(b: AdminBroker) -> list[dict]:
    async def read() -> list[dict]:
        async with zk_connect(b.zk, chroot=b.chroot) as zk:
            out = []
            for child in sorted(await zk.get_children("/config/changes")):
                data, _ = await zk.get(f"/config/changes/{child}")
                out.append(json.loads(data))
            return out
    return asyncio.run(read())


def wait_until(what: str, check, timeout: float = 20) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def throttle_in_force(b: AdminBroker, side: str) -> float | None:
    """The broker's KIP-73 rate in force, from its gauge (absent while unlimited)."""
    try:
        return metric(b, f"{side}_replication_throttle_bytes_per_second")
    except KeyError:
        return None


def error_code(future) -> int:  # noqa: ANN001
    with pytest.raises(KafkaException) as e:
        future.result()
    return e.value.args[0].code()


# ---- confluent-kafka ---------------------------------------------------------------------------

def test_confluent_topic_lifecycle_and_configs(admin_broker: AdminBroker) -> None:
    a = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    topic = "ck-configs"
    # validate_only writes nothing
    a.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "1"})], validate_only=True)[topic].result()
    assert znode(admin_broker, f"/brokers/topics/{topic}") is None
    a.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "1234"})], operation_timeout=20)[topic].result()
    assert topic in a.list_topics(timeout=10).topics
    assert znode(admin_broker, f"/config/topics/{topic}") == {"version": 1, "config": {"retention.ms": "1234"}}

    described = a.describe_configs([ConfigResource("topic", topic)])
    entries = next(iter(described.values())).result()
    assert entries["retention.ms"].value == "1234"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # not set on the topic: the broker's server.properties value, then Kafka's default
    assert entries["segment.bytes"].value == "2000000"
    assert entries["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["max.message.bytes"].value == "1048588"
    assert entries["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not entries["retention.ms"].is_read_only and not entries["retention.ms"].is_sensitive

    before = len(notifications(admin_broker))
    ops = [ConfigEntry("retention.ms", "99", incremental_operation=AlterConfigOpType.SET),
           ConfigEntry("leader.replication.throttled.replicas", "0:0,1:0",
                       incremental_operation=AlterConfigOpType.APPEND)]
    next(iter(a.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=ops)]).values())).result()
    assert znode(admin_broker, f"/config/topics/{topic}")["config"] == {
        "retention.ms": "99", "leader.replication.throttled.replicas": "0:0,1:0"}
    assert notifications(admin_broker)[before:] == [{"version": 2, "entity_path": f"topics/{topic}"}]
    subtract = [ConfigEntry("leader.replication.throttled.replicas", "0:0",
                            incremental_operation=AlterConfigOpType.SUBTRACT)]
    next(iter(a.incremental_alter_configs(
        [ConfigResource("topic", topic, incremental_configs=subtract)]).values())).result()
    assert znode(admin_broker, f"/config/topics/{topic}")["config"]["leader.replication.throttled.replicas"] == "1:0"

    # AlterConfigs replaces the whole config
    next(iter(a.alter_configs([ConfigResource("topic", topic, set_config={"retention.bytes": "5000"})]).values())).result()
    assert znode(admin_broker, f"/config/topics/{topic}")["config"] == {"retention.bytes": "5000"}

    # refused changes keep the old value and write nothing
    count = len(notifications(admin_broker))
    bad_value = a.alter_configs([ConfigResource("topic", topic, set_config={"retention.bytes": "lots"})])
    assert error_code(next(iter(bad_value.values()))) == KafkaError.INVALID_REQUEST
    unknown_key = a.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)])])
    assert error_code(next(iter(unknown_key.values()))) == KafkaError.INVALID_CONFIG
    not_a_list = a.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])])
    assert error_code(next(iter(not_a_list.values()))) == KafkaError.INVALID_REQUEST
    assert znode(admin_broker, f"/config/topics/{topic}")["config"] == {"retention.bytes": "5000"}
    assert len(notifications(admin_broker)) == count
    missing = a.describe_configs([ConfigResource("topic", "no-such-topic")])
    assert error_code(next(iter(missing.values()))) == KafkaError.UNKNOWN_TOPIC_OR_PART

    a.create_partitions([NewPartitions(topic, 4)], operation_timeout=20)[topic].result()
    wait_until("4 partitions", lambda: len(a.list_topics(topic, timeout=10).topics[topic].partitions) == 4)
    a.delete_topics([topic], operation_timeout=20)[topic].result()
    wait_until("topic deleted", lambda: topic not in a.list_topics(timeout=10).topics)


def test_confluent_broker_config_is_applied_through_the_watch(admin_broker: AdminBroker) -> None:
    a = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    own = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("leader.replication.throttled.rate", "3000000", incremental_operation=AlterConfigOpType.SET)])
    next(iter(a.incremental_alter_configs([own]).values())).result()
    assert znode(admin_broker, "/config/brokers/0")["config"] == {"leader.replication.throttled.rate": "3000000"}
    wait_until("the broker applies the rate",
               lambda: throttle_in_force(admin_broker, "leader") == 3000000)
    # The cluster-wide default (resource name ""): librdkafka refuses an empty name, so on our wire client.
    resp = asyncio.run(request(admin_broker, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 4, "resource_name": "", "configs": [
            {"name": "follower.replication.throttled.rate", "config_operation": 0, "value": "2000000"}]}],
        "validate_only": False}))
    assert resp["responses"][0]["error_code"] == 0
    assert znode(admin_broker, "/config/brokers/<default>")["config"] == {"follower.replication.throttled.rate": "2000000"}
    wait_until("the broker applies the default",
               lambda: throttle_in_force(admin_broker, "follower") == 2000000)

    entries = next(iter(a.describe_configs([ConfigResource("broker", "0")]).values())).result()
    leader = entries["leader.replication.throttled.rate"]
    assert (leader.value, leader.source, leader.is_read_only) == (
        "3000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    # librdkafka asks for synonyms; its dict keeps one per name (Kafka lists the default after the override)
    assert set(leader.synonyms) == {"leader.replication.throttled.rate"}
    follower = entries["follower.replication.throttled.rate"]
    assert (follower.value, follower.source) == ("2000000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert entries["log.segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["log.segment.bytes"].is_read_only
    assert entries["broker.id"].value == "0"

    # A static key cannot change at run time; another broker's id is not ours to answer for.
    static = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("log.segment.bytes", "1000", incremental_operation=AlterConfigOpType.SET)])
    assert error_code(next(iter(a.incremental_alter_configs([static]).values()))) == KafkaError.INVALID_REQUEST
    negative = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("leader.replication.throttled.rate", "-5", incremental_operation=AlterConfigOpType.SET)])
    assert error_code(next(iter(a.incremental_alter_configs([negative]).values()))) == KafkaError.INVALID_REQUEST
    assert throttle_in_force(admin_broker, "leader") == 3000000

    delete = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("leader.replication.throttled.rate", None, incremental_operation=AlterConfigOpType.DELETE)])
    next(iter(a.incremental_alter_configs([delete]).values())).result()
    assert znode(admin_broker, "/config/brokers/0")["config"] == {}
    wait_until("the broker drops the rate", lambda: throttle_in_force(admin_broker, "leader") is None)


def test_confluent_describe_cluster(admin_broker: AdminBroker) -> None:
    a = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    cluster = a.describe_cluster(include_authorized_operations=True).result()
    stored = znode(admin_broker, "/cluster/id")
    assert stored is not None and stored["version"] == "1"
    assert cluster.cluster_id == stored["id"] and len(stored["id"]) == 22
    assert cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", admin_broker.port)]
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}
    assert a.describe_cluster().result().authorized_operations is None
    assert a.list_topics(timeout=10).cluster_id == stored["id"]


# ---- kafka-python --------------------------------------------------------------------------------

def test_kafka_python_admin(admin_broker: AdminBroker) -> None:
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions
    from kafka.admin import NewTopic as KpNewTopic

    admin = KafkaAdminClient(bootstrap_servers=admin_broker.bootstrap, client_id="kp-admin")
    try:
        topic = "kp-admin"
        admin.create_topics([KpNewTopic(topic, 1, 1, topic_configs={"retention.ms": "555"})], timeout_ms=20000)
        assert topic in admin.list_topics()
        assert znode(admin_broker, f"/config/topics/{topic}")["config"] == {"retention.ms": "555"}
        modified = admin.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])  # non-default only
        assert set(modified["topic"][topic]) == {"retention.ms"}
        assert modified["topic"][topic]["retention.ms"]["value"] == "555"
        everything = admin.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        assert everything["topic"][topic]["min.insync.replicas"]["value"] == "1"
        admin.alter_configs([KpResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "556"})])
        assert znode(admin_broker, f"/config/topics/{topic}")["config"] == {"retention.ms": "556"}
        admin.create_partitions({topic: KpNewPartitions(3)})
        wait_until("3 partitions", lambda: len(admin.describe_topics([topic])[0]["partitions"]) == 3)
        # KafkaAdminClient.describe_cluster() itself expects DescribeCluster v1's endpoint_type (Kafka 3.7+)
        # and fails against Kafka 2.8's v0; its own message class, sent as it sends it, reads our answer.
        from kafka.protocol.admin import DescribeClusterRequest
        response = admin._manager.run(admin._manager.send, DescribeClusterRequest(
            include_cluster_authorized_operations=False))
        assert response.error_code == 0 and response.controller_id == 0
        assert response.cluster_id == znode(admin_broker, "/cluster/id")["id"]
        assert [b.broker_id for b in response.brokers] == [0]
        assert response.authorized_operations is None  # kafka-python reads INT32_MIN as "not asked for"
        admin.delete_topics([topic], timeout_ms=20000)
        wait_until("topic deleted", lambda: topic not in admin.list_topics())
    finally:
        admin.close()


# ---- KafkaJS ----------------------------------------------------------------------------------------

def test_kafkajs_admin(admin_broker: AdminBroker) -> None:
    if not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
        npm = shutil.which("npm")
        assert npm, "npm is needed for the KafkaJS tests (scripts/run test installs it)"
        subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=300)
    topic = "kjs-admin"
    run = subprocess.run(["node", str(NODE_DIR / "admin.js"), admin_broker.bootstrap, topic, "0"],
                         capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    out = json.loads(run.stdout)
    assert out["created"] is True
    parts = out["metadata"]["topics"][0]["partitions"]
    assert sorted(p["partitionId"] for p in parts) == [0, 1] and all(p["leader"] == 0 for p in parts)
    topic_entries = {e["configName"]: e for e in out["describedTopic"]["resources"][0]["configEntries"]}
    assert topic_entries["retention.ms"]["configValue"] == "4321"
    assert topic_entries["retention.ms"]["configSource"] == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert out["altered"]["resources"][0]["errorCode"] == 0
    after = out["describedAfter"]["resources"][0]["configEntries"]
    assert [(e["configName"], e["configValue"]) for e in after] == [("retention.ms", "777")]
    assert out["badAlter"] == "INVALID_CONFIG"
    broker_entries = {e["configName"]: e for e in out["describedBroker"]["resources"][0]["configEntries"]}
    assert set(broker_entries) == {"leader.replication.throttled.rate", "broker.id"}
    assert broker_entries["broker.id"]["readOnly"] is True
    assert out["cluster"]["controller"] == 0 and out["cluster"]["clusterId"] == znode(admin_broker, "/cluster/id")["id"]
    assert [b["nodeId"] for b in out["cluster"]["brokers"]] == [0]
    assert topic not in out["topicsAfterDelete"]
