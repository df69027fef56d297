"""SASL_SSL with SCRAM-SHA-512 (issue 20): three brokers whose only listener is SASL_SSL, replicating
and answering the controller over it as the SCRAM user `broker` (credentials written with
`minibroker configs` before the brokers start, as Kafka's docs bootstrap SCRAM), and the five
clients producing and consuming over it. One cluster for the module.

The authorizer is on: `broker` and `admin` are super users, bob may use `sasl-` topics and groups.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.security.acl import AclOperation as Op
from broker.security.acl import PatternType
from broker.zk.server import ZooKeeperServer
from fetcher.connection import KafkaConnection
from fetcher.sasl_client import SaslAuthenticationError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support import acls
from tests.support.brokers import BrokerProcess, start_together
from tests.support.cluster import Cluster, wait_identical_replicas
from tests.support.messages import expected_messages, read_back_with_kafka_python, round_trip_with_aiokafka
from tests.support.ports import free_port
from tests.support.sasl import PASSWORDS, scram_jaas, security
from tests.support.tls import Certificates
from tests.support.tools import configs, minibroker
from tests.support.topics import create_topic
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.clients

N = 300
MECH = "SCRAM-SHA-512"
BROKER_PASSWORD = "broker-pw-Ts55"


@dataclass
class SaslSsl:
    brokers: list[BrokerProcess]
    zk: str
    certs: Certificates
    client_config: Path  # admin's client.properties (--command-config)

    @property
    def bootstrap(self) -> str:
        return self.brokers[0].bootstrap

    def security(self, user: str, password: str | None = None):  # noqa: ANN201
        import dataclasses
        return dataclasses.replace(security(MECH, user, password, protocol="SASL_SSL"),
                                   ssl_truststore_location=str(self.certs.ca_pem))

    async def connect(self, user: str, password: str | None = None) -> KafkaConnection:
        return await KafkaConnection.open("127.0.0.1", self.brokers[0].port, security=self.security(user, password))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[SaslSsl]:
    tmp = tmp_path_factory.mktemp("saslssl")
    connect = zk_server_session.connect_string + f"/{tmp.name}"

    async def chroot() -> None:
        async with zk_connect(zk_server_session) as client:
            await client.ensure_path(f"/{tmp.name}")
    asyncio.run(chroot())
    # SCRAM credentials before any broker runs: the brokers authenticate to each other with them.
    for user, password in (("broker", BROKER_PASSWORD), ("admin", PASSWORDS["admin"]), ("bob", PASSWORDS["bob"])):
        configs(connect, "--entity-type", "users", "--entity-name", user, "--alter", "--add-config",
                f"{MECH}=[password={password}]", check=True)
    bob = [acls.allow(Op.ALL, "User:bob")]
    acls.seed(connect, {acls.topic("sasl-", PatternType.PREFIXED): bob, acls.group("sasl-", PatternType.PREFIXED): bob,
                        acls.CLUSTER: [acls.allow(Op.IDEMPOTENT_WRITE, "User:bob")]})
    certs = Certificates(tmp)
    brokers = []
    for i in range(3):
        me = certs.issue(f"broker{i}", "127.0.0.1", "localhost", unit="brokers")
        port = free_port()
        props = {"listeners": f"SASL_SSL://127.0.0.1:{port}", "inter.broker.listener.name": "SASL_SSL",
                 "sasl.enabled.mechanisms": MECH, "sasl.mechanism.inter.broker.protocol": MECH,
                 "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                     ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                      f'username="broker" password="{BROKER_PASSWORD}";'),
                 "ssl.keystore.type": "PEM", "ssl.keystore.location": str(me.pem),
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca_pem),
                 "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                 "super.users": "User:broker;User:admin", "auto.create.topics.enable": "false",
                 "offsets.topic.replication.factor": "1", "replica.fetch.wait.max.ms": "100"}
        b = BrokerProcess(tmp, i, connect, props)
        b.port = port
        brokers.append(b)
    start_together(brokers)
    config = tmp / "admin.properties"
    config.write_text(f"security.protocol=SASL_SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca_pem}\n"
                      f"sasl.mechanism={MECH}\nsasl.jaas.config={scram_jaas('admin')}\n")
    yield SaslSsl(brokers, connect, certs, config)
    for b in brokers:
        assert b.stop() == 0, b.log()


def _topic(c: SaslSsl, name: str) -> str:
    async def create() -> None:
        conn = await c.connect("admin")
        try:
            await create_topic(conn, name, replication_factor=3)
        finally:
            await conn.close()
    asyncio.run(create())
    return name


def _kafka_python_config(c: SaslSsl) -> dict[str, object]:
    return {"bootstrap_servers": c.bootstrap, "security_protocol": "SASL_SSL", "ssl_cafile": str(c.certs.ca_pem),
            "sasl_mechanism": MECH, "sasl_plain_username": "bob", "sasl_plain_password": PASSWORDS["bob"]}


def _librdkafka_config(c: SaslSsl) -> dict[str, str]:
    return {"bootstrap.servers": c.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(c.certs.ca_pem),
            "sasl.mechanism": MECH, "sasl.username": "bob", "sasl.password": PASSWORDS["bob"]}


def _read_back(c: SaslSsl, topic: str) -> list[tuple[bytes, bytes]]:
    config = _kafka_python_config(c)
    got, _ = read_back_with_kafka_python(str(config.pop("bootstrap_servers")), topic, N, **config)
    return [(k, v) for _, k, v in got]


def test_kcat(cluster: SaslSsl, tmp_path: Path) -> None:
    topic = _topic(cluster, "sasl-ssl-kcat")
    msgs = expected_messages(topic, N)
    args = [x for k, v in _librdkafka_config(cluster).items() if k != "sasl.mechanism"
            for x in ("-X", f"{k}={v}")] + ["-X", f"sasl.mechanisms={MECH}"]
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(k + b"\t" + v + b"\n" for k, v in msgs))
    run = subprocess.run(["kcat", *args, "-P", "-t", topic, "-p", "0", "-K", "\t", "-l", str(src)],
                         capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    run = subprocess.run(["kcat", *args, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                          "-f", "%k\t%s\n"], capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert [tuple(line.split(b"\t", 1)) for line in run.stdout.splitlines()] == msgs


def test_confluent_kafka(cluster: SaslSsl) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    topic = _topic(cluster, "sasl-ssl-ck")
    msgs = expected_messages(topic, N)
    p = Producer({**_librdkafka_config(cluster), "acks": "all"})
    errors: list[object] = []
    for k, v in msgs:
        p.produce(topic, v, k, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0 and errors == []
    consumer = Consumer({**_librdkafka_config(cluster), "group.id": "sasl-ssl-ck", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None and not m.error():
                got.append((m.key(), m.value()))
        assert got == msgs
    finally:
        consumer.close()


def test_kafka_python(cluster: SaslSsl) -> None:
    from kafka import KafkaProducer
    topic = _topic(cluster, "sasl-ssl-kp")
    msgs = expected_messages(topic, N)
    p = KafkaProducer(**_kafka_python_config(cluster), acks="all")
    try:
        for f in [p.send(topic, value=v, key=k, partition=0) for k, v in msgs]:
            f.get(timeout=60)
    finally:
        p.close()
    assert _read_back(cluster, topic) == msgs


def test_aiokafka(cluster: SaslSsl) -> None:
    from aiokafka.helpers import create_ssl_context
    topic = _topic(cluster, "sasl-ssl-aio")
    msgs = expected_messages(topic, N)
    options = {"bootstrap_servers": cluster.bootstrap, "security_protocol": "SASL_SSL", "sasl_mechanism": MECH,
               "sasl_plain_username": "bob", "sasl_plain_password": PASSWORDS["bob"],
               "ssl_context": create_ssl_context(cafile=str(cluster.certs.ca_pem))}
    got = asyncio.run(round_trip_with_aiokafka(topic, msgs, options))
    assert [(k, v) for _, k, v in got] == msgs


def test_kafkajs(cluster: SaslSsl, kafkajs_dir: Path) -> None:
    topic = _topic(cluster, "sasl-ssl-kjs")
    msgs = expected_messages(topic, N)
    run = subprocess.run(["node", str(kafkajs_dir / "sasl_produce.js"), cluster.bootstrap, topic, MECH.lower(), "bob",
                          PASSWORDS["bob"]],
                         input=json.dumps([[k.decode(), v.decode()] for k, v in msgs]).encode(),
                         env={**os.environ, "KAFKAJS_SSL": json.dumps({"ca": str(cluster.certs.ca_pem)})},
                         capture_output=True, timeout=180)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    assert json.loads(run.stdout) == [[0, 0]]
    assert _read_back(cluster, topic) == msgs


def test_wrong_password_over_tls(cluster: SaslSsl) -> None:
    with pytest.raises(SaslAuthenticationError) as e:
        asyncio.run(cluster.connect("bob", "not-bobs-password"))
    assert e.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_three_brokers_replicate_over_sasl_ssl(cluster: SaslSsl) -> None:
    """Replica fetches and controller requests all go over SASL_SSL as User:broker (the only
    listener); the tool creates the topic with --command-config; byte-identical replicas."""
    created = minibroker("topics", "--bootstrap-server", cluster.bootstrap, "--command-config",
                         str(cluster.client_config), "--create", "--topic", "sasl-ssl-replicated", "--partitions", "1",
                         "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    from confluent_kafka import Producer
    msgs = expected_messages("sasl-ssl-replicated", N * 3)
    p = Producer({**_librdkafka_config(cluster), "acks": "all", "linger.ms": 5})
    errors: list[object] = []
    for k, v in msgs:
        p.produce("sasl-ssl-replicated", v, k, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0 and errors == []

    async def check() -> None:
        async with zk_connect(cluster.zk) as zk:
            c = Cluster(cluster.brokers, zk)
            await c.wait_isr("sasl-ssl-replicated", 0, {0, 1, 2})
            await wait_identical_replicas(c, "sasl-ssl-replicated", 0, [0, 1, 2])
        conn = await cluster.connect("admin")
        try:
            meta = await conn.request(ApiKey.METADATA, 1, {"topics": None})
            assert sorted(b["node_id"] for b in meta["brokers"]) == [0, 1, 2]
        finally:
            await conn.close()
    asyncio.run(check())
    for b in cluster.brokers:
        log = b.log_path.read_text()
        assert BROKER_PASSWORD not in log and PASSWORDS["bob"] not in log and PASSWORDS["admin"] not in log
        assert "principal='User:broker'" in log  # the other brokers authenticated to this one


def test_an_authenticated_stranger_cannot_forge_inter_broker_requests(cluster: SaslSsl) -> None:
    """The probe's finding: inter-broker requests any client could forge. Here bob is
    authenticated and may do everything with `sasl-` topics, but has no ClusterAction: a follower
    Fetch posing as a replica with an offset far ahead gets TOPIC_AUTHORIZATION_FAILED (Kafka's
    answer) and moves neither the high watermark nor the ISR; a LeaderAndIsr with the cluster's
    real epochs gets CLUSTER_AUTHORIZATION_FAILED and changes no leadership. A client without
    credentials cannot send any request at all."""
    topic = _topic(cluster, "sasl-forge")
    from confluent_kafka import Producer
    p = Producer({**_librdkafka_config(cluster), "acks": "all"})
    for i in range(10):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(60) == 0

    async def forge() -> None:
        async with zk_connect(cluster.zk) as zk:
            c = Cluster(cluster.brokers, zk)
            before = await c.wait_isr(topic, 0, {0, 1, 2})
            leader = c.by_id(before["leader"])
            follower = next(r for r in (0, 1, 2) if r != leader.broker_id)
            controller_epoch = int((await zk.get("/controller_epoch"))[0])
            broker_epoch = await zk.czxid(f"/brokers/ids/{leader.broker_id}")
            bob = await KafkaConnection.open("127.0.0.1", leader.port, security=cluster.security("bob"))
            try:
                fetched = await bob.request(ApiKey.FETCH, 3, {
                    "replica_id": follower, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": 0, "fetch_offset": 1_000_000, "partition_max_bytes": 1 << 20}]}]})
                part = fetched["responses"][0]["partitions"][0]
                assert part["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                # As a consumer bob may read: the high watermark is still the 10 written.
                consumed = await bob.request(ApiKey.FETCH, 3, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
                assert consumed["responses"][0]["partitions"][0]["high_watermark"] == 10
                state = {"topic_name": topic, "partition_index": 0, "controller_epoch": controller_epoch,
                         "leader": follower, "leader_epoch": before["leader_epoch"] + 1, "isr": [follower],
                         "partition_epoch": 0, "replicas": [0, 1, 2]}
                answer = await bob.request(ApiKey.LEADER_AND_ISR, 2, {
                    "controller_id": 0, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
                    "topic_states": [{"topic_name": topic, "partition_states": [state]}],
                    "live_leaders": [{"broker_id": follower, "host_name": "127.0.0.1",
                                      "port": c.by_id(follower).port}]}, 10)
                assert answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            finally:
                await bob.close()
            after = await c.state(topic, 0)
            assert (after["leader"], sorted(after["isr"])) == (before["leader"], [0, 1, 2])
            admin = await KafkaConnection.open("127.0.0.1", leader.port, security=cluster.security("admin"))
            try:
                meta = await admin.request(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
                assert meta["topics"][0]["partitions"][0]["leader_id"] == before["leader"]
            finally:
                await admin.close()
        # TLS without SASL: the broker answers nothing but the handshake and closes.
        import dataclasses
        anonymous = dataclasses.replace(cluster.security("bob"), security_protocol="SSL", sasl_mechanism=None)
        stranger = await KafkaConnection.open("127.0.0.1", cluster.brokers[0].port, security=anonymous)
        try:
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError)):
                await stranger.request(ApiKey.METADATA, 1, {"topics": None}, 10)
        finally:
            await stranger.close()
    asyncio.run(forge())
