"""SASL (issue 20): PLAIN and SCRAM-SHA-256/512 on SASL_PLAINTEXT listeners of two real brokers, with
kcat, confluent-kafka, kafka-python, aiokafka and KafkaJS; failures, bad input, ACLs on the SASL
principal, credentials managed live with `minibroker configs` and AlterUserScramCredentials,
KIP-368 re-authentication. One two-broker cluster for the module.

Each broker: PLAINTEXT (inter-broker; User:ANONYMOUS is a super user, so the tests set up through
it), SASL_PLAINTEXT and REAUTH (SASL_PLAINTEXT with `connections.max.reauth.ms` 2000 through the
`listener.name.reauth.` prefix). The authorizer is on; alice and bob may use topics and groups
prefixed `sasl-`; admin is a super user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.security.acl import AclOperation as Op
from broker.security.acl import PatternType
from broker.zk.server import ZooKeeperServer
from fetcher.sasl_client import SaslAuthenticationError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support import acls
from tests.support.brokers import BrokerProcess, start_together
from tests.support.messages import expected_messages, read_back_with_kafka_python, round_trip_with_aiokafka
from tests.support.metrics import metric
from tests.support.ports import free_port
from tests.support.sasl import (
    PASSWORDS,
    RawClient,
    confluent_config,
    kcat_args,
    plain_jaas,
    python_client_config,
    sasl_connect,
)
from tests.support.tools import configs
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import produce
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.clients

DELAY_MS = 1000
REAUTH_MS = 2000
N = 300
SCRAM_ADD = f"SCRAM-SHA-512=[password={PASSWORDS['bob']}],SCRAM-SHA-256=[iterations=8192,password={PASSWORDS['bob']}]"


@dataclass
class SaslCluster:
    brokers: list[BrokerProcess]
    zk: str
    sasl_ports: list[int]
    reauth_ports: list[int]

    @property
    def port(self) -> int:
        return self.sasl_ports[0]


def _overrides() -> dict[str, str]:
    return {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(),
        "listener.name.reauth.plain.sasl.jaas.config": plain_jaas(),
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "connection.failed.authentication.delay.ms": str(DELAY_MS),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "auto.create.topics.enable": "false",
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[SaslCluster]:
    tmp = tmp_path_factory.mktemp("sasl")
    connect = zk_server_session.connect_string + f"/{tmp.name}"

    async def chroot() -> None:
        async with zk_connect(zk_server_session) as client:
            await client.ensure_path(f"/{tmp.name}")
    asyncio.run(chroot())
    users = [acls.allow(Op.ALL, "User:alice"), acls.allow(Op.ALL, "User:bob")]
    acls.seed(connect, {acls.topic("sasl-", PatternType.PREFIXED): users,
                        acls.group("sasl-", PatternType.PREFIXED): users,
                        # kafka-python's producer is idempotent: InitProducerId needs IdempotentWrite.
                        acls.CLUSTER: [acls.allow(Op.IDEMPOTENT_WRITE, "User:alice"),
                                       acls.allow(Op.IDEMPOTENT_WRITE, "User:bob")]})
    brokers, sasl_ports, reauth_ports = [], [], []
    for i in range(2):
        b = BrokerProcess(tmp, i, connect, _overrides(), metrics=True)
        sasl_ports.append(free_port())
        reauth_ports.append(free_port())
        # Appended: the last value of a key wins, and the PLAINTEXT port is the one the helper chose.
        b.props.write_text(b.props.read_text() + f"listeners=PLAINTEXT://127.0.0.1:{b.port},"
                           f"SASL_PLAINTEXT://127.0.0.1:{sasl_ports[-1]},REAUTH://127.0.0.1:{reauth_ports[-1]}\n")
        brokers.append(b)
    start_together(brokers)
    c = SaslCluster(brokers, connect, sasl_ports, reauth_ports)
    # bob's SCRAM credentials, added while the brokers run: they must see them without a restart.
    configs(connect, "--entity-type", "users", "--entity-name", "bob", "--alter", "--add-config", SCRAM_ADD, check=True)
    for port in sasl_ports:
        asyncio.run(wait_for(f"bob's credentials on :{port}", lambda p=port: _authenticates(p, "SCRAM-SHA-512", "bob")))
    yield c
    for b in brokers:
        assert b.stop() == 0, b.log()


async def _authenticates(port: int, mechanism: str, user: str) -> bool:
    try:
        conn = await sasl_connect(port, mechanism, user)
    except SaslAuthenticationError:
        return False
    await conn.close()
    return True


def _topic(cluster: SaslCluster, name: str) -> str:
    asyncio.run(create_topic(cluster.brokers[0], name, replication_factor=2))
    return name


USERS = {"PLAIN": "alice", "SCRAM-SHA-512": "bob", "SCRAM-SHA-256": "bob"}


# ---- the five clients: produce and consume -------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kcat(cluster: SaslCluster, tmp_path: Path, mechanism: str) -> None:
    topic = _topic(cluster, f"sasl-kcat-{mechanism.lower()}")
    msgs = expected_messages(topic, N)
    args = kcat_args(cluster.port, mechanism, USERS[mechanism])
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(k + b"\t" + v + b"\n" for k, v in msgs))
    run = subprocess.run(["kcat", *args, "-P", "-t", topic, "-p", "0", "-K", "\t", "-l", str(src)],
                         capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    run = subprocess.run(["kcat", *args, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                          "-f", "%k\t%s\n"], capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert [tuple(line.split(b"\t", 1)) for line in run.stdout.splitlines()] == msgs


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_confluent_kafka(cluster: SaslCluster, mechanism: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    topic = _topic(cluster, f"sasl-ck-{mechanism.lower()}")
    msgs = expected_messages(topic, N)
    p = Producer({**confluent_config(cluster.port, mechanism, USERS[mechanism]), "acks": "all"})
    errors: list[object] = []
    for k, v in msgs:
        p.produce(topic, v, k, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0 and errors == []
    c = Consumer({**confluent_config(cluster.sasl_ports[1], mechanism, USERS[mechanism]),
                  "group.id": f"sasl-ck-{mechanism.lower()}", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                got.append((m.key(), m.value()))
        assert got == msgs
    finally:
        c.close()


def _kafka_python_read(port: int, mechanism: str, user: str, topic: str) -> list[tuple[bytes, bytes]]:
    config = python_client_config(port, mechanism, user)
    got, _ = read_back_with_kafka_python(str(config.pop("bootstrap_servers")), topic, N, **config)
    return [(k, v) for _, k, v in got]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python(cluster: SaslCluster, mechanism: str) -> None:
    from kafka import KafkaProducer
    topic = _topic(cluster, f"sasl-kp-{mechanism.lower()}")
    msgs = expected_messages(topic, N)
    p = KafkaProducer(**python_client_config(cluster.port, mechanism, USERS[mechanism]), acks="all")
    try:
        for f in [p.send(topic, value=v, key=k, partition=0) for k, v in msgs]:
            f.get(timeout=60)
    finally:
        p.close()
    assert _kafka_python_read(cluster.sasl_ports[1], mechanism, USERS[mechanism], topic) == msgs


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_aiokafka(cluster: SaslCluster, mechanism: str) -> None:
    topic = _topic(cluster, f"sasl-aio-{mechanism.lower()}")
    msgs = expected_messages(topic, N)
    got = asyncio.run(round_trip_with_aiokafka(
        topic, msgs, python_client_config(cluster.port, mechanism, USERS[mechanism]),
        python_client_config(cluster.sasl_ports[1], mechanism, USERS[mechanism])))
    assert [(k, v) for _, k, v in got] == msgs


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafkajs(cluster: SaslCluster, kafkajs_dir: Path, mechanism: str) -> None:
    topic = _topic(cluster, f"sasl-kjs-{mechanism.lower()}")
    msgs = expected_messages(topic, N)
    user = USERS[mechanism]
    run = subprocess.run(["node", str(kafkajs_dir / "sasl_produce.js"), f"127.0.0.1:{cluster.port}", topic,
                          mechanism.lower(), user, PASSWORDS[user]],
                         input=json.dumps([[k.decode(), v.decode()] for k, v in msgs]).encode(),
                         capture_output=True, timeout=180)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    assert json.loads(run.stdout) == [[0, 0]]
    assert _kafka_python_read(cluster.sasl_ports[1], mechanism, user, topic) == msgs


def test_kafkajs_wrong_password_is_refused(cluster: SaslCluster, kafkajs_dir: Path) -> None:
    run = subprocess.run(["node", str(kafkajs_dir / "sasl_produce.js"), f"127.0.0.1:{cluster.port}", "sasl-none",
                          "scram-sha-512", "bob", "not-bobs-password"], input=b"[]", capture_output=True, timeout=180)
    assert run.returncode == 1
    assert "KafkaJSSASLAuthenticationError" in run.stderr.decode() or "SASL" in run.stderr.decode()


# ---- failures: Kafka's codes, the delay, one connection closed -----------------------------------

def test_wrong_password_fails_after_the_delay_and_closes(cluster: SaslCluster) -> None:
    def failures() -> float:
        try:
            return metric(cluster.brokers[0], "authentication_failures_total", listener="SASL_PLAINTEXT",
                          mechanism="PLAIN")
        except KeyError:
            return 0.0
    before = failures()

    async def run() -> tuple[dict, float, bool]:
        raw = await RawClient.open(cluster.port)
        raw.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert (await raw.response(ApiKey.SASL_HANDSHAKE, 1))["error_code"] == 0
        sent = time.monotonic()
        raw.send(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00wrong-password"})
        resp = await raw.response(ApiKey.SASL_AUTHENTICATE, 1)
        answered = time.monotonic() - sent
        return resp, answered, await raw.closed()
    resp, answered, closed = asyncio.run(run())
    assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert resp["error_message"] == "Authentication failed: Invalid username or password"
    assert answered >= DELAY_MS / 1000 * 0.95, f"answered after {answered:.3f} s, before the configured delay"
    assert closed
    assert failures() == before + 1
    with pytest.raises(SaslAuthenticationError) as e:
        asyncio.run(sasl_connect(cluster.port, "SCRAM-SHA-512", "bob", "wrong"))
    assert e.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert e.value.message == ("Authentication failed during authentication due to invalid credentials with SASL "
                               "mechanism SCRAM-SHA-512")


def test_unknown_mechanism(cluster: SaslCluster) -> None:
    async def run() -> tuple[dict, bool]:
        raw = await RawClient.open(cluster.port)
        raw.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        return await raw.response(ApiKey.SASL_HANDSHAKE, 1), await raw.closed()
    resp, closed = asyncio.run(run())
    assert resp == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                    "mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]}
    assert closed


def test_sasl_on_a_plaintext_listener_is_illegal_state(cluster: SaslCluster) -> None:
    async def run() -> tuple[dict, dict]:
        raw = await RawClient.open(cluster.brokers[0].port)
        raw.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        hs = await raw.response(ApiKey.SASL_HANDSHAKE, 1)
        raw.send(ApiKey.API_VERSIONS, 0, {})
        av = await raw.response(ApiKey.API_VERSIONS, 0)  # the connection is still served
        raw.close()
        return hs, av
    hs, av = asyncio.run(run())
    assert hs == {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    assert av["error_code"] == 0


def _handshaken(raw: RawClient) -> None:
    raw.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})


BAD_INPUT = {
    "metadata before authentication": lambda raw: raw.send(ApiKey.METADATA, 1, {"topics": None}),
    "SaslAuthenticate before the handshake": lambda raw: raw.send(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"x"}),
    "malformed SaslAuthenticate": lambda raw: (_handshaken(raw), raw.send_bytes(ApiKey.SASL_AUTHENTICATE, 1,
                                                                                  b"\x00\x00\x10\x00abc")),
    "oversized SaslAuthenticate": lambda raw: (_handshaken(raw), raw.send(ApiKey.SASL_AUTHENTICATE, 1,
                                                                          {"auth_bytes": b"\x00" * 600_000})),
    "garbage frame": lambda raw: raw.send_frame(b"\xff\xfe\x00\x01not a kafka request"),
    "SaslHandshake v0": lambda raw: raw.send(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_closes_only_that_connection(cluster: SaslCluster, case: str) -> None:
    async def run() -> tuple[bool, dict]:
        good = await sasl_connect(cluster.port, "PLAIN", "alice")
        raw = await RawClient.open(cluster.port)
        BAD_INPUT[case](raw)
        closed = await raw.closed()
        meta = await good.request(ApiKey.METADATA, 1, {"topics": None})  # the authenticated one is unharmed
        await good.close()
        return closed, meta
    closed, meta = asyncio.run(run())
    assert closed
    assert [b["node_id"] for b in meta["brokers"]] == [0, 1]


def test_an_oversized_frame_before_authentication_is_refused_unread(cluster: SaslCluster) -> None:
    """A size prefix of 50 MB on a new SASL connection (above sasl.server.max.receive.size, below
    socket.request.max.bytes), then a trickle of its body: the broker closes each such connection
    after the failure delay without waiting for the body or allocating it (Kafka's
    SaslServerAuthenticator bound), counts and logs the failure, and an authenticated client is
    served meanwhile. Before the bound moved to the frame reader, each of these frames cost the
    broker 50 MB of resident memory and the connection stayed open until the body arrived."""
    broker = cluster.brokers[0]
    size, count = 50 << 20, 4

    def failures() -> float:
        try:
            return metric(broker, "authentication_failures_total", listener="SASL_PLAINTEXT", mechanism="none")
        except KeyError:
            return 0.0
    before = failures()

    async def trickle(raw: RawClient, stop: asyncio.Event) -> int:
        sent = 4
        while not stop.is_set() and not raw.writer.transport.is_closing():
            raw.writer.write(b"\x00" * 1024)
            sent += 1024
            with contextlib.suppress(ConnectionError):
                await raw.writer.drain()
            await asyncio.sleep(0.02)
        return sent

    async def run() -> tuple[list[bool], list[int], dict, int, int]:
        good = await sasl_connect(cluster.port, "PLAIN", "alice")
        rss_before = broker.rss_bytes()
        raws = [await RawClient.open(cluster.port) for _ in range(count)]
        stop = asyncio.Event()
        for raw in raws:
            raw.writer.write(struct.pack(">i", size))
        trickling = [asyncio.create_task(trickle(raw, stop)) for raw in raws]
        meta = await good.request(ApiKey.METADATA, 1, {"topics": None})  # served while they wait
        closed = [await raw.closed(timeout=60) for raw in raws]
        rss_after = broker.rss_bytes()
        stop.set()
        sent = await asyncio.gather(*trickling)
        for raw in raws:
            raw.close()
        await good.close()
        return closed, sent, meta, rss_before, rss_after
    closed, sent, meta, rss_before, rss_after = asyncio.run(run())
    assert closed == [True] * count
    assert max(sent) < size // 4, "closed only after the body arrived"
    assert [b["node_id"] for b in meta["brokers"]] == [0, 1]
    growth = rss_after - rss_before
    assert growth < size // 4, f"RSS grew {growth >> 20} MiB for {count} refused frames of {size >> 20} MiB"
    assert failures() == before + count
    assert f"a frame of {size} bytes above sasl.server.max.receive.size (524288)" in broker.log()


# ---- the principal reaches the authorizer --------------------------------------------------------

def test_sasl_principal_reaches_acls(cluster: SaslCluster) -> None:
    topic = "acl-only-for-granted"
    asyncio.run(create_topic(cluster.brokers[0], topic, assignment={0: [0, 1]}))  # led by broker 0, where we produce

    async def produce_as(mechanism: str, user: str) -> int:
        conn = await sasl_connect(cluster.port, mechanism, user)
        try:
            return int((await produce(conn, topic, 0, [(b"k", b"v")]))["error_code"])
        finally:
            await conn.close()
    assert asyncio.run(produce_as("PLAIN", "alice")) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert asyncio.run(produce_as("SCRAM-SHA-512", "bob")) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert asyncio.run(produce_as("PLAIN", "admin")) == 0  # super.users
    acls.seed(cluster.zk, {acls.topic(topic): [acls.allow(Op.WRITE, "User:alice")]})
    assert asyncio.run(_eventually(lambda: produce_as("PLAIN", "alice"))) == 0
    assert asyncio.run(produce_as("SCRAM-SHA-512", "bob")) == ErrorCode.TOPIC_AUTHORIZATION_FAILED


async def _eventually(attempt, timeout: float = 15):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while True:
        result = await attempt()
        if result == 0 or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.2)


# ---- credentials managed live --------------------------------------------------------------------

def test_configs_credentials_live_on_every_broker(cluster: SaslCluster) -> None:
    add = f"SCRAM-SHA-512=[iterations=8192,password={PASSWORDS['carol']}]"
    configs(cluster.zk, "--entity-type", "users", "--entity-name", "carol", "--alter", "--add-config", add, check=True)
    for port in cluster.sasl_ports:  # no restart: each broker's config watch applies it
        asyncio.run(wait_for(f"carol on :{port}", lambda p=port: _authenticates(p, "SCRAM-SHA-512", "carol")))
    shown = configs(cluster.zk, "--entity-type", "users", "--entity-name", "carol", "--describe", check=True).stdout
    assert "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=8192" in shown
    assert "salt" not in shown and "stored_key" not in shown and PASSWORDS["carol"] not in shown

    async def keep_one() -> object:
        return await sasl_connect(cluster.sasl_ports[1], "SCRAM-SHA-512", "carol")
    loop = asyncio.new_event_loop()
    try:
        kept = loop.run_until_complete(keep_one())
        configs(cluster.zk, "--entity-type", "users", "--entity-name", "carol", "--alter",
                "--delete-config", "SCRAM-SHA-512", check=True)
        for port in cluster.sasl_ports:  # new connections are refused everywhere...
            loop.run_until_complete(wait_for(f"carol refused on :{port}",
                                             lambda p=port: _refused(p, "SCRAM-SHA-512", "carol")))
        # ...and a connection authenticated before keeps its session, as in Kafka.
        meta = loop.run_until_complete(kept.request(ApiKey.METADATA, 1, {"topics": None}))  # type: ignore[attr-defined]
        assert len(meta["brokers"]) == 2
        loop.run_until_complete(kept.close())  # type: ignore[attr-defined]
    finally:
        loop.close()


async def _refused(port: int, mechanism: str, user: str) -> bool:
    return not await _authenticates(port, mechanism, user)


def test_user_scram_credential_apis_with_confluent_admin(cluster: SaslCluster) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )
    # Kafka 2.8 alters credentials on the active controller only (NOT_CONTROLLER elsewhere).
    async def controller() -> int:
        async with zk_connect(cluster.zk) as zk:
            data, _ = await zk.get("/controller")
            return int(json.loads(data)["brokerid"])
    port = cluster.sasl_ports[asyncio.run(controller())]
    admin = AdminClient(confluent_config(port, "PLAIN", "admin"))
    up = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                      PASSWORDS["dave"].encode())
    for f in admin.alter_user_scram_credentials([up]).values():
        assert f.result(timeout=30) is None
    described = admin.describe_user_scram_credentials(["dave"])["dave"].result(timeout=30)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 4096)]
    for port in cluster.sasl_ports:
        asyncio.run(wait_for(f"dave on :{port}", lambda p=port: _authenticates(p, "SCRAM-SHA-256", "dave")))
    everyone = admin.describe_user_scram_credentials().result(timeout=30)
    assert {"bob", "dave"} <= set(everyone)
    # Deleting a credential dave does not have: RESOURCE_NOT_FOUND, nothing changed.
    gone = admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)])
    with pytest.raises(Exception, match="RESOURCE_NOT_FOUND|does not exist"):
        gone["dave"].result(timeout=30)
    # alice may not: Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED).
    alice = AdminClient(confluent_config(port, "PLAIN", "alice"))
    refused = alice.alter_user_scram_credentials([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)])
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED|uthoriz"):
        refused["dave"].result(timeout=30)
    assert asyncio.run(_authenticates(cluster.port, "SCRAM-SHA-256", "dave"))


# ---- KIP-368 re-authentication -------------------------------------------------------------------

def test_librdkafka_reauthenticates(cluster: SaslCluster) -> None:
    from confluent_kafka import Producer
    topic = _topic(cluster, "sasl-reauth")
    p = Producer({**confluent_config(cluster.reauth_ports[0], "SCRAM-SHA-512", "bob"), "acks": "all"})
    errors: list[object] = []
    delivered = 0
    started = time.monotonic()
    while time.monotonic() - started < 2.5 * REAUTH_MS / 1000:  # across two session lifetimes
        p.produce(topic, b"v", b"k", partition=0, on_delivery=lambda err, _m: err and errors.append(err))
        delivered += 1
        p.poll(0.05)
    assert p.flush(30) == 0 and errors == []
    del p
    # The producing connection (to the partition's leader, either broker) re-authenticated on its
    # own socket, every session lifetime, without a delivery error.
    reauths = [line for b in cluster.brokers for line in b.log_path.read_text().splitlines()
               if "sasl.authenticated" in line and "listener='REAUTH'" in line and "reauthentication=True" in line
               and "principal='User:bob'" in line]
    assert reauths, "no re-authentication logged"
    assert all("session_lifetime_ms=2000" in line for line in reauths)


def test_expired_session_is_closed_at_its_next_request(cluster: SaslCluster) -> None:
    async def run() -> tuple[int, bool]:
        from fetcher.sasl_client import authenticate
        raw = await RawClient.open(cluster.reauth_ports[1])

        async def send(key: int, version: int, body: dict) -> dict:
            raw.send(key, version, body)
            return await raw.response(key, version)
        lifetime = await authenticate(send, "PLAIN", "alice", PASSWORDS["alice"])
        raw.send(ApiKey.METADATA, 1, {"topics": None})
        await raw.response(ApiKey.METADATA, 1)  # within the session: served
        await asyncio.sleep(REAUTH_MS / 1000 + 0.5)
        raw.send(ApiKey.METADATA, 1, {"topics": None})
        return lifetime, await raw.closed()
    lifetime, closed = asyncio.run(run())
    assert lifetime == REAUTH_MS
    assert closed


# ---- last: nothing secret was ever logged --------------------------------------------------------

def test_logs_name_no_secret(cluster: SaslCluster) -> None:
    for b in cluster.brokers:
        text = b.log_path.read_text()
        assert "sasl.authenticated" in text and "sasl.authentication_failed" in text
        for secret in [*PASSWORDS.values(), "wrong-password", "not-bobs-password"]:
            assert secret not in text, f"broker {b.broker_id}'s log holds a password"
        assert "stored_key" not in text and "server_key" not in text
