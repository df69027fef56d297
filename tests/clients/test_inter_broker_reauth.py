"""KIP-368 between brokers: three brokers whose inter-broker listener is SASL_PLAINTEXT (SCRAM-SHA-512,
user `broker`) with `connections.max.reauth.ms=2000` replicate for ~10 s while confluent-kafka
produces (acks=all) on a PLAINTEXT client listener. The replica fetchers re-authenticate on their
own sockets (the brokers log `sasl.authenticated … reauthentication=True` for User:broker) and
never reconnect: no new inter-broker login, no failed fetch or controller send, no session closed
by the broker's gate; the replicas end byte-identical. (With main's client before re-authentication,
each broker's inter-broker logins went from 3 to 9 over the window: the fetchers were cut and reconnected.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.zk.server import ZooKeeperServer
from tests.support.brokers import BrokerProcess, start_together
from tests.support.cluster import Cluster, wait_identical_replicas
from tests.support.ports import free_port
from tests.support.tools import configs
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.clients

MECH = "SCRAM-SHA-512"
BROKER_PASSWORD = "broker-pw-Rq08"
REAUTH_MS = 2000
WINDOW_S = 10
TOPIC = "reauth-replicated"
PARTITIONS = 3


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[
        tuple[list[BrokerProcess], str]]:
    tmp = tmp_path_factory.mktemp("ibreauth")
    connect = zk_server_session.connect_string + f"/{tmp.name}"

    async def chroot() -> None:
        async with zk_connect(zk_server_session) as client:
            await client.ensure_path(f"/{tmp.name}")
    asyncio.run(chroot())
    configs(connect, "--entity-type", "users", "--entity-name", "broker", "--alter", "--add-config",
            f"{MECH}=[password={BROKER_PASSWORD}]", check=True)
    procs = []
    for i in range(3):
        internal = free_port()
        b = BrokerProcess(tmp, i, connect, {
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CLIENT:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.sasl.enabled.mechanisms": MECH,
            "sasl.mechanism.inter.broker.protocol": MECH,
            "listener.name.internal.scram-sha-512.sasl.jaas.config":
                ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                 f'username="broker" password="{BROKER_PASSWORD}";'),
            "listener.name.internal.connections.max.reauth.ms": str(REAUTH_MS),
            "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1",
            "replica.fetch.wait.max.ms": "100"})
        # Appended: the last value of a key wins; the helper's port becomes the client listener.
        b.props.write_text(b.props.read_text() + f"listeners=INTERNAL://127.0.0.1:{internal},"
                           f"CLIENT://127.0.0.1:{b.port}\n")
        procs.append(b)
    start_together(procs)
    yield procs, connect
    for b in procs:
        assert b.stop() == 0, b.log()


def _logins(text: str, reauthentication: bool) -> int:
    return sum(1 for line in text.splitlines()
               if "sasl.authenticated" in line and "principal='User:broker'" in line
               and f"reauthentication={reauthentication}" in line)


def _since(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def test_replica_fetchers_reauthenticate_without_reconnecting(brokers: tuple[list[BrokerProcess], str]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    procs, zk = brokers
    bootstrap = ",".join(b.bootstrap for b in procs)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(timeout=60)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[object] = []

    def send(n: int, start: int) -> None:
        for i in range(start, start + n):
            p.produce(TOPIC, f"value-{i:07d}".encode() * 8, f"key-{i}".encode(), partition=i % PARTITIONS,
                      on_delivery=lambda err, _m: err and errors.append(err))

    async def settled() -> None:
        async with zk_connect(zk) as client:
            c = Cluster(procs, client)
            for part in range(PARTITIONS):
                await c.wait_isr(TOPIC, part, {0, 1, 2}, timeout=60)
                await wait_identical_replicas(c, TOPIC, part, [0, 1, 2])

    send(300, 0)
    assert p.flush(60) == 0 and errors == []
    asyncio.run(settled())  # every fetcher connected and logged in
    marks = [b.log_path.stat().st_size for b in procs]
    before = [_logins(b.log_path.read_text(), False) for b in procs]
    assert sum(before) >= 2 * PARTITIONS  # each follower's fetcher logged in to each leader

    sent, started = 300, time.monotonic()
    while time.monotonic() - started < WINDOW_S:  # five session lifetimes
        send(50, sent)
        sent += 50
        p.poll(0.1)
    assert p.flush(60) == 0 and errors == []
    asyncio.run(settled())

    window = [_since(b.log_path, m) for b, m in zip(procs, marks, strict=True)]
    after = [_logins(b.log_path.read_text(), False) for b in procs]
    assert after == before, "an inter-broker connection logged in anew during the window"
    reauths = sum(_logins(text, True) for text in window)
    # Six fetcher connections, each re-authenticating every 1.7-1.9 s for 10 s.
    assert reauths >= 2 * PARTITIONS, window
    for text in window:
        assert "fetcher.request_failed" not in text and "controller.send_retry" not in text
        assert "sasl.connection_closed" not in text and "sasl.authentication_failed" not in text
        assert BROKER_PASSWORD not in text
