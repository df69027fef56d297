"""TLS listeners (issue 20, items 1-2) with real brokers and real clients.

One broker for the module: a PLAINTEXT listener and an SSL one requiring client certificates
(`listener.name.ssl.ssl.client.auth=required`, the per-listener prefix), its key encrypted with
ssl.key.password, principals mapped by `ssl.principal.mapping.rules` (alice and bob to their
common names, anyone else to the RFC 2253 subject) and the ACL authorizer on. Certificates are
made by trustme in the fixture. kcat, confluent-kafka, kafka-python, aiokafka and KafkaJS produce
and read back over SSL; the mapped principal reaches the authorizer; a plaintext client or a
handshake of garbage closes only its own connection; bad settings stop start-up naming the key;
the tools take --command-config; three brokers replicate over an SSL-only inter-broker listener.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from broker.security.acl import AclOperation as Op
from broker.zk.server import ZooKeeperServer
from fetcher.connection import KafkaConnection
from fetcher.security import ClientSecurity
from protocol.api_keys import ApiKey
from tests.support import acls
from tests.support.brokers import BrokerProcess, start_together
from tests.support.cluster import Cluster, wait_identical_replicas
from tests.support.messages import expected_messages, read_back_with_kafka_python, round_trip_with_aiokafka
from tests.support.ports import free_port
from tests.support.tls import Certificates, Identity, continued, pkcs12_keystore, pkcs12_truststore
from tests.support.tools import ROOT, minibroker
from tests.support.topics import create_topic
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.clients

N = 2000  # messages per client round trip: enough for many TLS records each way, quick on a shared box
RULES = "RULE:^CN=(alice|bob),OU=clients,.*$/$1/L,DEFAULT"


@dataclass
class Tls:
    broker: BrokerProcess
    certs: Certificates
    ssl_bootstrap: str
    alice: Identity
    bob: Identity
    carol: Identity
    zk: str

    def files(self, who: Identity, name: str) -> tuple[str, str, str]:
        """(CA, certificate chain, key) file paths for clients that want them apart."""
        crt, key = self.certs.write(who, name)
        return str(self.certs.ca_pem), str(crt), str(key)


def _ssl_props(certs: Certificates, me: Identity, key_password: str | None = None) -> dict[str, str]:
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(me.pem),
             "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca_pem)}
    if key_password:
        props["ssl.key.password"] = key_password
    return props


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[Tls]:
    work = tmp_path_factory.mktemp("tls")
    certs = Certificates(work)
    server = certs.issue("broker0", "127.0.0.1", "localhost", unit="brokers", key_password="broker-key-pw")
    plain, secure = free_port(), free_port()
    connect = zk_server_session.connect_string + f"/{work.name}"
    props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
        **_ssl_props(certs, server, "broker-key-pw"),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": RULES,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "auto.create.topics.enable": "false",
    }
    b = BrokerProcess(work, 0, connect, props)
    b.port = plain  # the project's helpers (create_topic) use the PLAINTEXT listener
    b.start()
    try:
        yield Tls(b, certs, f"127.0.0.1:{secure}", certs.issue("alice"), certs.issue("bob"),
                  certs.issue("carol"), connect)
    finally:
        code = b.stop()
    assert code == 0, b.log()


def _kafka_python_ssl(t: Tls, who: Identity, name: str) -> dict[str, object]:
    ca, crt, key = t.files(who, name)
    return {"security_protocol": "SSL", "ssl_cafile": ca, "ssl_certfile": crt, "ssl_keyfile": key}


def _read_back(t: Tls, topic: str, n: int = N) -> list[tuple[int, bytes, bytes]]:
    """Every message of partition 0, read over SSL by kafka-python as alice."""
    got, _ = read_back_with_kafka_python(t.ssl_bootstrap, topic, n, timeout_ms=15_000,
                                         **_kafka_python_ssl(t, t.alice, "alice-reader"))
    return got


def _assert_round_trip(t: Tls, topic: str, msgs: list[tuple[bytes, bytes]]) -> None:
    got = _read_back(t, topic, len(msgs))
    assert [o for o, _, _ in got] == list(range(len(msgs)))
    assert [(k, v) for _, k, v in got] == msgs


def _librdkafka_ssl(t: Tls, who: Identity, name: str) -> dict[str, str]:
    ca, crt, key = t.files(who, name)
    return {"security.protocol": "ssl", "ssl.ca.location": ca, "ssl.certificate.location": crt,
            "ssl.key.location": key}


# ---- every client, over SSL with a client certificate -------------------------------------------

def test_kcat_produces_and_consumes_over_ssl(tls: Tls, tmp_path: Path) -> None:
    topic = "tls-kcat"
    asyncio.run(create_topic(tls.broker, topic))
    msgs = expected_messages(topic, N)
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(k + b"\t" + v + b"\n" for k, v in msgs))
    ssl_args = [a for k, v in _librdkafka_ssl(tls, tls.alice, "alice-kcat").items() for a in ("-X", f"{k}={v}")]
    produced = subprocess.run(["kcat", "-b", tls.ssl_bootstrap, *ssl_args, "-P", "-t", topic, "-p", "0", "-K", "\t",
                               "-X", "acks=all", "-l", str(src)], capture_output=True, timeout=120)
    assert produced.returncode == 0, produced.stderr.decode()[-2000:]
    consumed = subprocess.run(["kcat", "-b", tls.ssl_bootstrap, *ssl_args, "-C", "-t", topic, "-p", "0",
                               "-o", "beginning", "-e", "-q", "-f", "%o\t%k\t%s\n"], capture_output=True, timeout=120)
    assert consumed.returncode == 0, consumed.stderr.decode()[-2000:]
    got = [tuple(line.split(b"\t")) for line in consumed.stdout.split(b"\n")[:-1]]
    assert [int(o) for o, _, _ in got] == list(range(N))
    assert [(k, v) for _, k, v in got] == msgs


def test_confluent_kafka_produces_and_consumes_over_ssl(tls: Tls) -> None:
    topic = "tls-confluent"
    asyncio.run(create_topic(tls.broker, topic))
    msgs = expected_messages(topic, N)
    conf = {"bootstrap.servers": tls.ssl_bootstrap, **_librdkafka_ssl(tls, tls.alice, "alice-ck")}
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    errors: list[KafkaError] = []
    for k, v in msgs:
        p.produce(topic, v, k, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0
    assert errors == []
    got = _consume_all(conf, topic, N)
    assert [o for o, _, _ in got] == list(range(N))
    assert [(k, v) for _, k, v in got] == msgs


def test_kafka_python_produces_over_ssl(tls: Tls) -> None:
    from kafka import KafkaProducer
    topic = "tls-kafka-python"
    asyncio.run(create_topic(tls.broker, topic))
    msgs = expected_messages(topic, N)
    p = KafkaProducer(bootstrap_servers=tls.ssl_bootstrap, acks="all", **_kafka_python_ssl(tls, tls.alice, "alice-kp"))
    try:
        futures = [p.send(topic, key=k, value=v, partition=0) for k, v in msgs]
        p.flush(60)
        assert [f.get(30).offset for f in futures] == list(range(N))
    finally:
        p.close()
    _assert_round_trip(tls, topic, msgs)


def test_aiokafka_produces_and_consumes_over_ssl(tls: Tls) -> None:
    from aiokafka.helpers import create_ssl_context
    topic = "tls-aiokafka"
    asyncio.run(create_topic(tls.broker, topic))
    msgs = expected_messages(topic, N)
    ca, crt, key = tls.files(tls.alice, "alice-aio")
    options = {"bootstrap_servers": tls.ssl_bootstrap, "security_protocol": "SSL",
               "ssl_context": create_ssl_context(cafile=ca, certfile=crt, keyfile=key)}
    got = asyncio.run(round_trip_with_aiokafka(topic, msgs, options))
    assert [o for o, _, _ in got] == list(range(N))
    assert [(k, v) for _, k, v in got] == msgs


def test_kafkajs_produces_over_ssl(tls: Tls, kafkajs_dir: Path) -> None:
    topic = "tls-kafkajs"
    asyncio.run(create_topic(tls.broker, topic))
    msgs = expected_messages(topic, N)
    ca, crt, key = tls.files(tls.alice, "alice-kjs")
    run = subprocess.run(["node", str(kafkajs_dir / "produce.js"), tls.ssl_bootstrap, topic, "-1", "none"],
                         input=json.dumps([[k.decode(), v.decode()] for k, v in msgs]).encode(),
                         env={**os.environ, "KAFKAJS_SSL": json.dumps({"ca": ca, "cert": crt, "key": key})},
                         capture_output=True, timeout=180)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    acked = json.loads(run.stdout)
    assert [code for _, code in acked] == [0] * len(acked)
    _assert_round_trip(tls, topic, msgs)


# ---- the principal from the certificate reaches the authorizer ----------------------------------

def _produce(t: Tls, who: Identity, name: str, topic: str) -> list[KafkaError | None]:
    p = Producer({"bootstrap.servers": t.ssl_bootstrap, **_librdkafka_ssl(t, who, name),
                  "message.timeout.ms": 15000, "retries": 0})
    results: list[KafkaError | None] = []
    for i in range(3):
        p.produce(topic, f"m{i}".encode(), partition=0, on_delivery=lambda err, _m: results.append(err))
    p.flush(30)
    return results


def test_mapped_certificate_principals_reach_the_acl_authorizer(tls: Tls) -> None:
    topic = "tls-acl"
    asyncio.run(create_topic(tls.broker, topic))
    # alice by the RULE (her common name), carol by DEFAULT (her whole RFC 2253 subject); bob has none.
    carol = f"User:{tls.carol.subject}"
    assert carol == "User:CN=carol,OU=clients,O=minibroker tests"
    acls.seed(tls.zk, {acls.topic(topic): [acls.allow(op, "User:alice") for op in (Op.WRITE, Op.READ, Op.DESCRIBE)]
                       + [acls.allow(op, carol) for op in (Op.WRITE, Op.DESCRIBE)]})
    assert _produce(tls, tls.alice, "alice-acl", topic) == [None] * 3
    assert _produce(tls, tls.carol, "carol-acl", topic) == [None] * 3
    refused = _produce(tls, tls.bob, "bob-acl", topic)
    assert refused and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in refused)
    assert [o for o, _, _ in _read_back(tls, topic, 6)] == list(range(6))  # bob's never appended


# ---- bad input: only that connection -------------------------------------------------------------

def test_plaintext_client_and_garbage_handshake_close_only_their_connection(tls: Tls) -> None:
    host, _, port = tls.ssl_bootstrap.rpartition(":")
    alice = ClientSecurity(security_protocol="SSL", ssl_truststore_location=str(tls.certs.ca_pem),
                           ssl_keystore_location=str(tls.alice.pem))

    async def run() -> None:
        async with await KafkaConnection.open(host, int(port), security=alice) as good:
            # A plaintext Kafka client (ApiVersions v0) on the TLS port, then a handshake of garbage.
            for junk in (b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test",
                         b"\x16\x03\x01\x00\x05garbage-after-a-record-header" * 4):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(junk)
                assert await asyncio.wait_for(reader.read(4096), 15) == b""  # closed, nothing answered
                writer.close()
                resp = await good.request(ApiKey.METADATA, 1, {"topics": None})
                assert [b["node_id"] for b in resp["brokers"]] == [0]
            # A client without a certificate (ssl.client.auth=required) is refused in the handshake.
            nocert = ClientSecurity(security_protocol="SSL", ssl_truststore_location=str(tls.certs.ca_pem))
            with pytest.raises((ConnectionError, ssl.SSLError)):
                async with await KafkaConnection.open(host, int(port), security=nocert, timeout=10) as c:
                    await c.request(ApiKey.METADATA, 1, {"topics": None})
            # A server certificate for another name fails the client's https host-name check.
            with pytest.raises(ssl.SSLCertVerificationError):
                await KafkaConnection.open("127.0.0.1", int(port), timeout=10, security=ClientSecurity(
                    security_protocol="SSL", ssl_truststore_certificates=_other_ca_pem(tls)))
            resp = await good.request(ApiKey.METADATA, 1, {"topics": None})
            assert resp["brokers"][0]["port"] == int(port)  # the SSL listener's own endpoint

    asyncio.run(run())
    log = tls.broker.log_path.read_text()
    failures = [line for line in log.splitlines() if "connection.tls_handshake_failed" in line]
    assert len(failures) >= 3
    assert "BEGIN" not in log and "broker-key-pw" not in log


def _other_ca_pem(t: Tls) -> str:
    """A CA that signed nothing the broker holds."""
    import trustme
    return trustme.CA().cert_pem.bytes().decode()


@pytest.mark.parametrize("change,key", [
    ({"ssl.keystore.location": "/nonexistent/broker.pem"}, "ssl.keystore.location"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    # The PEM file named as a PKCS12 store.
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "p12-pw", "ssl.key.password": ""},
     "ssl.keystore.location"),
    ({"ssl.key.password": "wrong"}, "ssl.key.password"),
    ({"listener.name.ssl.ssl.truststore.location": "__GARBAGE__"}, "listener.name.ssl.ssl.truststore.location"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
])
def test_bad_tls_settings_stop_the_broker_naming_the_key(tls: Tls, tmp_path: Path, change: dict[str, str],
                                                          key: str) -> None:
    server = tls.certs.issue("broker-bad", "127.0.0.1", key_password="right")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    props = {"broker.id": "7", "listeners": f"SSL://127.0.0.1:{free_port()}", "zookeeper.connect": tls.zk,
             "security.inter.broker.protocol": "SSL",
             "log.dirs": str(tmp_path / "logs"), **_ssl_props(tls.certs, server, "right"),
             **{k: (str(garbage) if v == "__GARBAGE__" else v) for k, v in change.items()}}
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    run = subprocess.run([sys.executable, "-m", "broker", "serve", str(path)], cwd=str(ROOT),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert key in run.stderr
    assert "right" not in run.stderr + run.stdout and "BEGIN" not in run.stderr + run.stdout


# ---- the tools: --command-config ---------------------------------------------------------------

def test_tools_connect_over_ssl_with_command_config(tls: Tls, tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    # KIP-651 inline PEM, as Java properties continuation lines.
    config.write_text(
        "security.protocol=SSL\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={tls.certs.ca_pem}\nssl.keystore.type=PEM\n"
        f"ssl.keystore.certificate.chain={continued(tls.alice.chain)}\n"
        f"ssl.keystore.key={continued(tls.alice.key)}\n")
    created = minibroker("topics", "--bootstrap-server", tls.ssl_bootstrap, "--command-config", str(config),
                         "--create", "--topic", "tls-tool", "--partitions", "2", "--replication-factor", "1")
    assert created.returncode == 0, created.stderr
    described = minibroker("topics", "--bootstrap-server", tls.ssl_bootstrap, "--command-config", str(config),
                           "--describe", "--topic", "tls-tool")
    assert described.returncode == 0, described.stderr
    assert described.stdout.count("Partition:") == 2
    listed = minibroker("groups", "--bootstrap-server", tls.ssl_bootstrap, "--command-config", str(config), "--list")
    assert listed.returncode == 0, listed.stderr
    added = minibroker("acls", "--bootstrap-server", tls.ssl_bootstrap, "--command-config", str(config), "--add",
                       "--allow-principal", "User:dave", "--operation", "Read", "--topic", "tls-tool")
    assert added.returncode == 0, added.stderr
    acl_list = minibroker("acls", "--bootstrap-server", tls.ssl_bootstrap, "--command-config", str(config),
                          "--list", "--topic", "tls-tool")
    assert "User:dave" in acl_list.stdout, acl_list.stderr
    probe = subprocess.run([sys.executable, "-m", "broker.tools.probe", tls.ssl_bootstrap, "--command-config",
                            str(config)], cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0 and probe.stdout.startswith("ok:"), probe.stdout + probe.stderr
    # Without it the tool speaks plaintext to the TLS port and gets no answer.
    plain = minibroker("topics", "--bootstrap-server", tls.ssl_bootstrap, "--describe", "--topic", "tls-tool",
                       "--timeout", "5")
    assert plain.returncode != 0
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SSL\nssl.truststore.location=/nonexistent/ca.pem\n")
    refused = minibroker("topics", "--bootstrap-server", tls.ssl_bootstrap, "--command-config", str(bad), "--list")
    assert refused.returncode != 0 and "ssl.truststore.location" in refused.stderr


# ---- three brokers replicating over an SSL inter-broker listener --------------------------------

def test_three_brokers_replicate_over_an_ssl_inter_broker_listener(tmp_path: Path,
                                                                  zk_server_session: ZooKeeperServer) -> None:
    certs = Certificates(tmp_path)
    connect = zk_server_session.connect_string + f"/{tmp_path.name}"
    brokers = []
    for i in range(3):
        me = certs.issue(f"broker{i}", "127.0.0.1", "localhost", unit="brokers")
        port = free_port()
        # SSL is the only listener: every replica fetch, controller request and client goes over TLS.
        props = {"listeners": f"SSL://127.0.0.1:{port}", "security.inter.broker.protocol": "SSL",
                 "ssl.client.auth": "required", "ssl.truststore.location": str(certs.ca_pem),
                 "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                 "super.users": ";".join(f"User:CN=broker{j},OU=brokers,O=minibroker tests" for j in range(3)),
                 "offsets.topic.replication.factor": "1", "replica.fetch.wait.max.ms": "100"}
        if i == 1:  # one broker with its key inline (KIP-651), as continuation lines in its properties file
            props |= {"ssl.keystore.certificate.chain": continued(me.chain), "ssl.keystore.key": continued(me.key)}
        else:
            props["ssl.keystore.location"] = str(me.pem)
        b = BrokerProcess(tmp_path, i, connect, props)
        b.port = port
        brokers.append(b)
    start_together(brokers)
    client = certs.issue("operator")
    acls.seed(connect, {acls.topic("*"): [acls.allow(Op.ALL, "User:" + client.subject)],
                        acls.CLUSTER: [acls.allow(Op.ALL, "User:" + client.subject)]})
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.location={certs.ca_pem}\n"
                      f"ssl.keystore.location={client.pem}\n")

    async def run() -> None:
        async with zk_connect(connect) as zk:
            cluster = Cluster(brokers, zk)
            await cluster.wait_for("3 registered brokers", lambda: _registered(zk))
            created = minibroker("topics", "--bootstrap-server", brokers[0].bootstrap, "--command-config",
                                 str(config), "--create", "--topic", "tls-replicated", "--partitions", "1",
                                 "--replication-factor", "3")
            assert created.returncode == 0, created.stderr
            msgs = expected_messages("tls-replicated", N)
            p = Producer({"bootstrap.servers": brokers[0].bootstrap, "acks": "all", "linger.ms": 5,
                          "security.protocol": "ssl", "ssl.ca.location": str(certs.ca_pem),
                          "ssl.certificate.location": str(certs.write(client, "operator")[0]),
                          "ssl.key.location": str(certs.write(client, "operator")[1])})
            errors: list[KafkaError] = []
            for k, v in msgs:
                p.produce("tls-replicated", v, k, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
            assert await asyncio.to_thread(p.flush, 60) == 0
            assert errors == []
            await cluster.wait_isr("tls-replicated", 0, {0, 1, 2})
            await wait_identical_replicas(cluster, "tls-replicated", 0, [0, 1, 2])
            return await cluster.controller()

    try:
        controller = asyncio.run(run())
        # Controlled shutdown of the others goes to the controller over TLS too.
        for b in sorted(brokers, key=lambda b: b.broker_id == controller):
            assert b.stop() == 0, b.log()
        for b in brokers:
            log = b.log_path.read_text()
            assert "tls_handshake_failed" not in log and "BEGIN" not in log, log[-3000:]
            if b.broker_id != controller:
                assert "broker.controlled_shutdown_done" in log, log[-3000:]
    finally:
        for b in brokers:
            b.kill()


async def _registered(zk) -> bool:  # noqa: ANN001
    return len(await zk.get_children("/brokers/ids")) == 3 and await zk.exists("/controller")


# ---- PKCS12 key and trust stores: brokers, the inter-broker client, a tool, confluent-kafka -----

def test_pkcs12_stores_on_brokers_between_brokers_in_a_tool_and_with_confluent_kafka(
        tmp_path: Path, zk_server_session: ZooKeeperServer) -> None:
    """Two brokers on an SSL-only listener requiring client certificates, every store PKCS12:
    broker 0's key store made by cryptography and its trust store by Java's keytool (trusted
    certificate entries), broker 1's by the openssl command and cryptography. They replicate to
    each other (the inter-broker client presents the PKCS12 key), a tool creates the topic with
    PKCS12 stores in --command-config, and confluent-kafka produces and consumes with its own
    PKCS12 key store (librdkafka's ssl.keystore.location/ssl.keystore.password)."""
    certs = Certificates(tmp_path)
    connect = zk_server_session.connect_string + f"/{tmp_path.name}"
    made = [("cryptography", "keytool"), ("openssl", "cryptography")]
    brokers = []
    for i, (key_maker, trust_maker) in enumerate(made):
        me = certs.issue(f"broker{i}", "127.0.0.1", "localhost", unit="brokers")
        port = free_port()
        props = {"listeners": f"SSL://127.0.0.1:{port}", "security.inter.broker.protocol": "SSL",
                 "ssl.client.auth": "required",
                 "ssl.keystore.type": "PKCS12", "ssl.keystore.password": f"ks{i}-pw",
                 "ssl.keystore.location": str(pkcs12_keystore(me, tmp_path / f"broker{i}.p12", f"ks{i}-pw",
                                                              key_maker)),
                 "ssl.truststore.type": "PKCS12", "ssl.truststore.password": f"ts{i}-pw",
                 "ssl.truststore.location": str(pkcs12_truststore(certs.ca_pem, tmp_path / f"trust{i}.p12",
                                                                  f"ts{i}-pw", trust_maker)),
                 "offsets.topic.replication.factor": "1", "replica.fetch.wait.max.ms": "100"}
        b = BrokerProcess(tmp_path, i, connect, props)
        b.port = port
        brokers.append(b)
    start_together(brokers)
    client = certs.issue("operator")
    client_p12 = pkcs12_keystore(client, tmp_path / "operator.p12", "op-pw")
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SSL\nssl.keystore.type=PKCS12\n"
                      f"ssl.keystore.location={client_p12}\nssl.keystore.password=op-pw\n"
                      "ssl.truststore.type=PKCS12\nssl.truststore.password=ts0-pw\n"
                      f"ssl.truststore.location={tmp_path / 'trust0.p12'}\n")
    librdkafka = {"bootstrap.servers": brokers[0].bootstrap, "security.protocol": "ssl",
                  "ssl.ca.location": str(certs.ca_pem), "ssl.keystore.location": str(client_p12),
                  "ssl.keystore.password": "op-pw"}
    topic = "p12-replicated"

    async def run() -> list[tuple[int, bytes, bytes]]:
        async with zk_connect(connect) as zk:
            cluster = Cluster(brokers, zk)
            created = minibroker("topics", "--bootstrap-server", brokers[1].bootstrap, "--command-config",
                                 str(config), "--create", "--topic", topic, "--partitions", "1",
                                 "--replication-factor", "2")
            assert created.returncode == 0, created.stderr
            msgs = expected_messages(topic, N)
            p = Producer({**librdkafka, "acks": "all", "linger.ms": 5})
            errors: list[KafkaError] = []
            for k, v in msgs:
                p.produce(topic, v, k, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
            assert await asyncio.to_thread(p.flush, 60) == 0
            assert errors == []
            await cluster.wait_isr(topic, 0, {0, 1}, timeout=60)
            await wait_identical_replicas(cluster, topic, 0, [0, 1])
            return await asyncio.to_thread(_consume_all, librdkafka, topic, len(msgs))

    try:
        got = asyncio.run(run())
        msgs = expected_messages(topic, N)
        assert [o for o, _, _ in got] == list(range(N))
        assert [(k, v) for _, k, v in got] == msgs
        for b in brokers:
            assert b.stop() == 0, b.log()
        for b in brokers:
            log = b.log_path.read_text()
            assert "tls_handshake_failed" not in log and "-pw" not in log, log[-3000:]
    finally:
        for b in brokers:
            b.kill()


def _consume_all(conf: dict[str, str], topic: str, n: int) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({**conf, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes, bytes]] = []
        while len(got) < n:
            m = c.poll(15)
            assert m is not None, f"only {len(got)} of {n} messages read"
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value()))
        return got
    finally:
        c.close()
