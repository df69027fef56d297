"""Kafka 2.8's admin and metadata APIs on the wire, version by version, and their bad input:
one real broker on a real ZooKeeper, the project's own client (so every version can be asked for).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import uuid

from broker.config_catalog import ConfigSource, ConfigType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.tools import configs
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce
from tests.support.zookeeper import zk_connect

INT32_MIN = -(1 << 31)
ZERO = uuid.UUID(int=0)
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 3
SET, DELETE, APPEND = 0, 1, 2


async def _znode(zk_server, path: str) -> dict | None:  # noqa: ANN001
    async with zk_connect(zk_server) as zk:
        if not await zk.exists(path):
            return None
        return json.loads((await zk.get(path))[0])


async def _changes(zk_server) -> int:  # noqa: ANN001
    async with zk_connect(zk_server) as zk:
        return len(await zk.get_children("/config/changes"))


async def test_metadata_every_version(broker, zk_server) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "md", partitions=2)
        state = await _znode(zk_server, "/brokers/topics/md/partitions/0/state")
        cluster = await _znode(zk_server, "/cluster/id")
        assert state is not None and cluster is not None
        for version in range(12):
            body = {"topics": [{"name": "md"}], "include_topic_authorized_operations": True,
                    "include_cluster_authorized_operations": True}
            md = await conn.request(ApiKey.METADATA, version, body)
            topic = md["topics"][0]
            assert topic["error_code"] == 0 and topic["name"] == "md"
            assert [p["partition_index"] for p in topic["partitions"]] == [0, 1]
            assert [(b["node_id"], b["host"], b["port"]) for b in md["brokers"]] == [(0, "127.0.0.1", broker.port)]
            if version >= 1:
                assert md["controller_id"] == 0 and md["brokers"][0]["rack"] is None
            if version >= 2:
                assert md["cluster_id"] == cluster["id"]
            if version >= 5:
                assert topic["partitions"][0]["offline_replicas"] == []
            if version >= 7:
                assert topic["partitions"][0]["leader_epoch"] == state["leader_epoch"]
            if version >= 8:  # READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
                assert topic["topic_authorized_operations"] == 0b1101_1111_1000
            if 8 <= version <= 10:  # CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, (DESCRIBE|ALTER)_CONFIGS, IDEMPOTENT_WRITE
                assert md["cluster_authorized_operations"] == 0b1_1111_1010_0000
            if version >= 10:
                assert topic["topic_id"] == ZERO


async def test_metadata_authorized_operations_default_and_auto_creation(broker, zk_server) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        md = await conn.request(ApiKey.METADATA, 8, {"topics": [{"name": "no-create"}],
                                                     "allow_auto_topic_creation": False})
        assert md["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert md["topics"][0]["topic_authorized_operations"] == INT32_MIN
        assert md["cluster_authorized_operations"] == INT32_MIN
        assert await _znode(zk_server, "/brokers/topics/no-create") is None
        # the broker default (auto.create.topics.enable=true, the design card's) creates when allowed
        md = await conn.request(ApiKey.METADATA, 9, {"topics": [{"name": "auto-made"}]})
        assert md["topics"][0]["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
        assert await _znode(zk_server, "/brokers/topics/auto-made") is not None
        # asking for all topics never creates
        async def listed() -> bool:
            md = await conn.request(ApiKey.METADATA, 11, {"topics": None})
            return "auto-made" in [t["name"] for t in md["topics"]]
        await wait_for("the auto-created topic listed", listed)
        # topic ids and null names are refused as Kafka 2.8 refuses them, on every topic
        md = await conn.request(ApiKey.METADATA, 10, {"topics": [{"name": "x", "topic_id": uuid.uuid4()},
                                                                 {"name": "auto-made"}]})
        assert [t["error_code"] for t in md["topics"]] == [ErrorCode.INVALID_REQUEST] * 2
        md = await conn.request(ApiKey.METADATA, 11, {"topics": [{"name": None}]})
        assert [t["error_code"] for t in md["topics"]] == [ErrorCode.INVALID_REQUEST]
        assert await _znode(zk_server, "/brokers/topics/x") is None


async def test_api_versions_v3_client_software(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        good = await conn.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "confluent-kafka-python",
                                                          "client_software_version": "2.16.1-rdkafka-2.16.1"})
        assert good["error_code"] == 0 and good["api_keys"]
        bad = await conn.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "bad name!",
                                                         "client_software_version": "1"})
        assert bad["error_code"] == ErrorCode.INVALID_REQUEST and bad["api_keys"] == []
        again = await conn.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "a", "client_software_version": "1"})
        assert again["error_code"] == 0  # same connection


async def test_create_topics_v5_to_v7_report_configs(broker, zk_server) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        for version in (5, 6, 7):
            resp = await conn.request(ApiKey.CREATE_TOPICS, version, {"topics": [
                {"name": f"ct{version}", "num_partitions": 3, "replication_factor": 1,
                 "configs": [{"name": "retention.ms", "value": "1000"}]}], "timeout_ms": 20000})
            t = resp["topics"][0]
            assert (t["error_code"], t["num_partitions"], t["replication_factor"]) == (0, 3, 1)
            configs = {c["name"]: c for c in t["configs"]}
            assert configs["retention.ms"]["value"] == "1000"
            assert configs["retention.ms"]["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
            assert configs["segment.bytes"]["config_source"] == ConfigSource.DEFAULT_CONFIG
            if version == 7:
                assert t["topic_id"] == ZERO
        resp = await conn.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": "ct-null", "num_partitions": 1, "replication_factor": 1,
             "configs": [{"name": "retention.ms", "value": None}]}], "timeout_ms": 1000})
        assert resp["topics"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        assert resp["topics"][0]["configs"] is None
    assert await _znode(zk_server, "/brokers/topics/ct-null") is None


async def test_delete_topics_v6_by_name_and_by_id(broker, zk_server) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "del6")
        some_id = uuid.uuid4()
        resp = await conn.request(ApiKey.DELETE_TOPICS, 6, {"topics": [
            {"name": "del6", "topic_id": ZERO}, {"name": None, "topic_id": some_id}], "timeout_ms": 20000})
        by_name, by_id = resp["responses"]
        assert (by_name["name"], by_name["error_code"]) == ("del6", 0)
        assert (by_id["name"], by_id["topic_id"], by_id["error_code"]) == (None, some_id, ErrorCode.UNKNOWN_TOPIC_ID)
        await create_topic(conn, "both")
        resp = await conn.request(ApiKey.DELETE_TOPICS, 6, {"topics": [
            {"name": "both", "topic_id": some_id}, {"name": "both", "topic_id": ZERO}], "timeout_ms": 1000})
        assert [r["error_code"] for r in resp["responses"]] == [ErrorCode.INVALID_REQUEST] * 2
    assert await _znode(zk_server, "/admin/delete_topics/both") is None
    assert await _znode(zk_server, "/brokers/topics/both") is not None


async def test_describe_configs_every_version(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "dc", configs={"max.message.bytes": "5000"})
        for version in range(5):
            resp = await conn.request(ApiKey.DESCRIBE_CONFIGS, version, {
                "resources": [{"resource_type": TOPIC, "resource_name": "dc", "configuration_keys": None},
                              {"resource_type": BROKER, "resource_name": "0",
                               "configuration_keys": ["leader.replication.throttled.rate"]}],
                "include_synonyms": True, "include_documentation": True})
            topic, own = resp["results"]
            entries = {e["name"]: e for e in topic["configs"]}
            mmb = entries["max.message.bytes"]
            assert mmb["value"] == "5000" and not mmb["read_only"] and not mmb["is_sensitive"]
            if version == 0:
                assert mmb["is_default"] is False and entries["segment.bytes"]["is_default"] is True
            else:
                assert mmb["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
                assert [(s["name"], s["value"], s["source"]) for s in mmb["synonyms"]] == [
                    ("max.message.bytes", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                    ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG)]
            if version >= 3:
                assert mmb["config_type"] == ConfigType.INT and mmb["documentation"] is None
            assert [e["name"] for e in own["configs"]] == ["leader.replication.throttled.rate"]
            assert own["configs"][0]["value"] == str((1 << 63) - 1)


async def test_bad_config_requests_get_kafkas_errors_and_write_nothing(broker, zk_server) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "bad", configs={"retention.ms": "100"})
        before = await _changes(zk_server)

        # An unknown resource type fails every resource of the request.
        for key, version, body in [
            (ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": TOPIC, "resource_name": "bad",
                                                          "configuration_keys": None},
                                                         {"resource_type": GROUP, "resource_name": "g",
                                                          "configuration_keys": None}]}),
            (ApiKey.ALTER_CONFIGS, 2, {"resources": [
                {"resource_type": TOPIC, "resource_name": "bad", "configs": [{"name": "retention.ms", "value": "5"}]},
                {"resource_type": 99, "resource_name": "x", "configs": []}], "validate_only": False}),
            (ApiKey.ALTER_CONFIGS, 0, {"resources": [
                {"resource_type": BROKER_LOGGER, "resource_name": "0", "configs": []}], "validate_only": False}),
            (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
                {"resource_type": TOPIC, "resource_name": "bad",
                 "configs": [{"name": "retention.ms", "config_operation": SET, "value": "5"}]},
                {"resource_type": 0, "resource_name": "x", "configs": []}], "validate_only": False}),
        ]:
            resp = await conn.request(key, version, body)
            results = resp.get("results") or resp["responses"]
            assert [r["error_code"] for r in results] == [ErrorCode.INVALID_REQUEST] * len(results), (key, resp)

        # Per resource: each bad one gets its own error; the good one beside them goes through.
        resp = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [
            {"resource_type": TOPIC, "resource_name": "bad", "configs": [
                {"name": "retention.ms", "config_operation": SET, "value": "1"},
                {"name": "retention.ms", "config_operation": DELETE, "value": None}]},        # duplicate key
            {"resource_type": TOPIC, "resource_name": "no-such", "configs": [
                {"name": "retention.ms", "config_operation": SET, "value": "1"}]},            # unknown topic
            {"resource_type": BROKER, "resource_name": "7", "configs": [
                {"name": "leader.replication.throttled.rate", "config_operation": SET, "value": "1"}]},  # not us
            {"resource_type": BROKER, "resource_name": "zero", "configs": []},                # not an id
            {"resource_type": BROKER, "resource_name": "0", "configs": [
                {"name": "no.such.key", "config_operation": SET, "value": "1"}]},             # unknown key
            {"resource_type": BROKER, "resource_name": "0", "configs": [
                {"name": "leader.replication.throttled.rate", "config_operation": 9, "value": "1"}]},  # no such op
            {"resource_type": BROKER_LOGGER, "resource_name": "0", "configs": [
                {"name": "root", "config_operation": SET, "value": "DEBUG"}]},                # no loggers
        ], "validate_only": False})
        errors = [(r["resource_name"], r["error_code"]) for r in resp["responses"]]
        # resources are keyed by (type, name) as Kafka keys them: the last BROKER "0" entry wins
        assert errors == [("bad", ErrorCode.INVALID_REQUEST), ("no-such", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                          ("7", ErrorCode.INVALID_REQUEST), ("zero", ErrorCode.INVALID_REQUEST),
                          ("0", ErrorCode.INVALID_REQUEST), ("0", ErrorCode.INVALID_REQUEST)]

        resp = await conn.request(ApiKey.ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": TOPIC, "resource_name": "bad", "configs": [{"name": "retention.ms", "value": None}]},
            {"resource_type": BROKER, "resource_name": "0", "configs": [
                {"name": "log.dirs", "value": "/elsewhere"}]},
            {"resource_type": BROKER, "resource_name": "", "configs": [
                {"name": "follower.replication.throttled.rate", "value": "-1"}]},
        ], "validate_only": False})
        assert [r["error_code"] for r in resp["responses"]] == [ErrorCode.INVALID_REQUEST] * 3
        assert "retention.ms" in resp["responses"][0]["error_message"]
        assert "log.dirs" in resp["responses"][1]["error_message"]
        assert "follower.replication.throttled.rate" in resp["responses"][2]["error_message"]

        # validate_only answers as a real change would and writes nothing
        resp = await conn.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [
            {"resource_type": TOPIC, "resource_name": "bad", "configs": [{"name": "retention.ms", "value": "7"}]},
            {"resource_type": TOPIC, "resource_name": "bad2", "configs": []}], "validate_only": True})
        assert [r["error_code"] for r in resp["responses"]] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]

        assert await _changes(zk_server) == before
        assert (await _znode(zk_server, "/config/topics/bad"))["config"] == {"retention.ms": "100"}
        assert await _znode(zk_server, "/config/brokers/0") is None
        assert await _znode(zk_server, "/config/brokers/7") is None
        assert await _znode(zk_server, "/config/topics/no-such") is None

        # and a good one after all that still goes through, on the same connection
        resp = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": TOPIC, "resource_name": "bad", "configs": [
                {"name": "follower.replication.throttled.replicas", "config_operation": APPEND, "value": "0:0"}]}],
            "validate_only": False})
        assert resp["responses"][0]["error_code"] == 0
        assert (await _znode(zk_server, "/config/topics/bad"))["config"] == {
            "retention.ms": "100", "follower.replication.throttled.replicas": "0:0"}


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, 1) + b"t"
    return struct.pack(">i", len(head) + len(body)) + head + body


async def test_oversize_array_closes_only_that_connection(broker, zk_server) -> None:  # noqa: ANN001
    async with await connect(broker) as other:
        await create_topic(other, "keep", configs={"retention.ms": "100"})
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            # DescribeConfigs v0 claiming 2**31-1 resources; AlterConfigs v0 claiming as many configs
            s.sendall(_frame(ApiKey.DESCRIBE_CONFIGS, 0, struct.pack(">i", 0x7FFFFFFF)))
            assert s.recv(100) == b""
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            body = struct.pack(">ib", 1, TOPIC) + struct.pack(">h", 4) + b"keep" + struct.pack(">i", 0x7FFFFFFF)
            s.sendall(_frame(ApiKey.ALTER_CONFIGS, 0, body))
            assert s.recv(100) == b""
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            # AlterConfigs v0 with a null resource name (a non-nullable string, as in Kafka's schema)
            s.sendall(_frame(ApiKey.ALTER_CONFIGS, 0, struct.pack(">ibh", 1, TOPIC, -1) + struct.pack(">ib", 0, 0)))
            assert s.recv(100) == b""
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            # IncrementalAlterConfigs v1 (flexible: request header v2) with a null config name (compact length 0)
            head = struct.pack(">hhih", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, 1, 1) + b"t" + b"\x00"
            body = b"\x02" + struct.pack(">b", TOPIC) + b"\x05keep" + b"\x02" + b"\x00" + b"\x00" + b"\x021" + b"\x00"
            s.sendall(struct.pack(">i", len(head) + len(body) + 3) + head + body + b"\x00\x00\x00")
            assert s.recv(100) == b""
        resp = await other.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": TOPIC, "resource_name": "keep", "configuration_keys": ["retention.ms"]}]})
        assert resp["results"][0]["configs"][0]["value"] == "100"
    await wait_for("the broker still logs the bad frames only", lambda: "request.malformed" in broker.log())


async def test_topic_config_from_the_api_is_enforced_by_the_broker(broker) -> None:  # noqa: ANN001
    """IncrementalAlterConfigs writes the znode; the broker's config watch applies it to its partitions."""
    async with await connect(broker) as conn:
        await create_topic(conn, "misr")
        assert (await produce(conn, "misr", 0, [(b"k", b"v")], acks=-1))["error_code"] == 0
        resp = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": TOPIC, "resource_name": "misr", "configs": [
                {"name": "min.insync.replicas", "config_operation": SET, "value": "2"}]}], "validate_only": False})
        assert resp["responses"][0]["error_code"] == 0

        async def refused() -> bool:
            r = await produce(conn, "misr", 0, [(b"k", b"v")], acks=-1)
            return r["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
        await wait_for("min.insync.replicas=2 in force on an RF 1 topic", refused)
        resp = await conn.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [
            {"resource_type": TOPIC, "resource_name": "misr", "configs": []}], "validate_only": False})
        assert resp["responses"][0]["error_code"] == 0

        async def accepted() -> bool:
            return (await produce(conn, "misr", 0, [(b"k", b"v")], acks=-1))["error_code"] == 0
        await wait_for("the override removed", accepted)


async def test_the_api_and_minibroker_configs_share_one_znode_and_one_validation(broker, zk_server) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "shared")
        r = await asyncio.to_thread(configs, zk_server.connect_string, "--entity-type", "topics", "--entity-name",
                                    "shared", "--alter", "--add-config", "leader.replication.throttled.replicas=[0:0,1:0]")
        assert r.returncode == 0, r.stderr

        async def described() -> str | None:
            resp = await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
                {"resource_type": TOPIC, "resource_name": "shared",
                 "configuration_keys": ["leader.replication.throttled.replicas"]}]})
            entry = resp["results"][0]["configs"][0]
            return entry["value"] if entry["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG else None
        assert await described() == "0:0,1:0"

        resp = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": TOPIC, "resource_name": "shared", "configs": [
                {"name": "retention.bytes", "config_operation": SET, "value": "123456"}]}], "validate_only": False})
        assert resp["responses"][0]["error_code"] == 0
        r = await asyncio.to_thread(configs, zk_server.connect_string, "--entity-type", "topics", "--entity-name",
                                    "shared", "--describe")
        assert "leader.replication.throttled.replicas=0:0,1:0" in r.stdout and "retention.bytes=123456" in r.stdout

        # a value the CLI refuses, the API refuses too (and neither writes)
        r = await asyncio.to_thread(configs, zk_server.connect_string, "--entity-type", "topics", "--entity-name",
                                    "shared", "--alter", "--add-config", "retention.bytes=-7")
        assert r.returncode != 0 and "retention.bytes" in r.stderr
        resp = await conn.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [
            {"resource_type": TOPIC, "resource_name": "shared",
             "configs": [{"name": "retention.bytes", "value": "-7"}]}], "validate_only": False})
        assert resp["responses"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        assert "retention.bytes" in resp["responses"][0]["error_message"]
        assert (await _znode(zk_server, "/config/topics/shared"))["config"] == {
            "leader.replication.throttled.replicas": "0:0,1:0", "retention.bytes": "123456"}
