"""zookeeper.set.acl=true on real brokers and a real ZooKeeper (issue 20, item 6).

Two brokers authenticate with the digest credentials of the JAAS file KAFKA_OPTS names and
create their znodes with Kafka's secure ACLs. The cluster works: a replicated topic is created,
confluent-kafka produces and consumes, `minibroker configs` with the same KAFKA_OPTS changes a
broker config (under the sensitive /config/brokers) that both brokers apply, and a topic is
deleted. A ZooKeeper client without credentials, or with wrong ones, can read /brokers but
writes nothing (NoAuth), cannot read /config/brokers or /config/users, and `minibroker configs`
without the credentials is refused. A client's authentication outlives a ZooKeeper restart.
`minibroker zookeeper-security-migration` secures a tree written open, and opens it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path

import pytest

from broker.zk import layout as L
from broker.zk.client import NoAuthError, NoNodeError, ZkClient
from broker.zk.jaas import ZkCredentials
from broker.zk.server import ZooKeeperServer
from broker.zk.znode_acls import ALL, READ, ZnodeAcl
from tests.support.brokers import BrokerProcess, start_together
from tests.support.metrics import metric
from tests.support.tools import configs, minibroker, topics
from tests.support.topics import create_topic
from tests.support.traffic import produce_messages, read_partition
from tests.support.waiting import wait_for
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.integration

USER, PASSWORD = "kafka", "zk-secret-4711"
CHROOT = "/secured"
JAAS = f"""Client {{
  org.apache.zookeeper.server.auth.DigestLoginModule required
  username="{USER}"
  password="{PASSWORD}";
}};
"""
WORLD_READ = ZnodeAcl(READ, "world", "anyone")


def _kafka_opts(tmp_path: Path) -> dict[str, str]:
    jaas = tmp_path / "zk_jaas.conf"
    jaas.write_text(JAAS)
    return {"KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"}


async def _refused(what: str, op: Awaitable[object]) -> None:
    try:
        await op
    except NoAuthError:
        return
    raise AssertionError(f"{what} was allowed")


def _throttle(broker: BrokerProcess) -> float | None:
    try:
        return metric(broker, "leader_replication_throttle_bytes_per_second")
    except KeyError:  # absent while unlimited
        return None


def _secured(acls: tuple[ZnodeAcl, ...], world_readable: bool) -> bool:
    """Kafka's secure ACL: all for the brokers' digest identity (user:base64(sha1(user:password))),
    plus read for the world unless the path is sensitive."""
    creator = [a for a in acls if a.scheme == "digest" and a.id.startswith(f"{USER}:") and a.perms == ALL]
    return len(creator) == 1 and len(acls) == (2 if world_readable else 1) and (WORLD_READ in acls) == world_readable


async def test_cluster_with_zookeeper_acls(tmp_path: Path, zk_server: ZooKeeperServer) -> None:
    env = _kafka_opts(tmp_path)
    connect = zk_server.connect_string + CHROOT
    brokers = [BrokerProcess(tmp_path, i, connect, {"zookeeper.set.acl": "true", "num.partitions": "1"},
                             metrics=True, env=env) for i in (1, 2)]
    try:
        start_together(brokers)
        for b in brokers:
            # This tree's broker ran (the event names the user, never the password).
            assert f"auth_user='{USER}'" in b.log() and "secure_acls=True" in b.log()

        await create_topic(brokers[0], "secured", 1, 2)
        sent = produce_messages(brokers[0].bootstrap, "secured", [(None, b"v%d" % i, 0) for i in range(100)])
        assert len(sent) == 100
        assert [v for _, v in read_partition(brokers[1].bootstrap, "secured", 0, 100)] == [b"v%d" % i for i in range(100)]

        # A dynamic broker config through the tool with the brokers' credentials, applied by both.
        done = configs(connect, "--entity-type", "brokers", "--entity-default", "--alter",
                       "--add-config", "leader.replication.throttled.rate=123456", env=env)
        assert done.returncode == 0, done.stderr
        for b in brokers:
            await wait_for(f"broker {b.broker_id} applies the rate", lambda b=b: _throttle(b) == 123456, 30)
        # Without them the tool is refused and writes nothing.
        refused = configs(connect, "--entity-type", "topics", "--entity-name", "secured", "--alter",
                          "--add-config", "retention.ms=1000", env={"KAFKA_OPTS": ""})
        assert refused.returncode != 0 and "NoAuth" in refused.stderr, refused.stderr
        assert PASSWORD not in done.stdout + done.stderr + refused.stderr

        async with zk_connect(connect) as anonymous:
            # World-readable: the brokers, the topic, the config change notifications.
            assert sorted(await anonymous.get_children(L.BROKER_IDS)) == ["1", "2"]
            assert (await anonymous.get(L.broker_path(1)))[0]
            assert (await anonymous.get(L.topic_path("secured")))[0]
            assert await anonymous.get_children(L.CONFIG_CHANGES)
            # But not writable: no notification, no topic deletion, no reassignment, no config.
            await _refused("a config change notification", anonymous.create(
                f"{L.CONFIG_CHANGES}/config_change_", b'{"version":2,"entity_path":"brokers/<default>"}',
                sequential=True))
            await _refused("a topic deletion", anonymous.create(f"{L.DELETE_TOPICS}/secured", b""))
            await _refused("a reassignment", anonymous.create(L.REASSIGN, b'{"version":1,"partitions":[]}'))
            await _refused("a topic config", anonymous.create("/config/topics/secured", b"{}"))
            await _refused("a partition state", anonymous.set(L.partition_state_path("secured", 0), b"{}"))
            await _refused("the controller's removal", anonymous.delete(L.CONTROLLER))
            await _refused("a broker's registration", anonymous.delete(L.broker_path(2)))
            await _refused("an ACL", anonymous.create("/kafka-acl/Topic", b""))
            await _refused("an ACL change notification", anonymous.create(
                "/kafka-acl-changes/acl_changes_", b"Topic:secured", sequential=True))
            # Sensitive: broker configs (and credentials, below) are not even readable.
            await _refused("reading /config/brokers/<default>", anonymous.get("/config/brokers/<default>"))

            # Every znode the brokers and the tool made carries Kafka's ACL.
            for path in (L.BROKER_IDS, L.broker_path(1), L.topic_path("secured"), L.partition_state_path("secured", 0),
                         L.CONTROLLER, L.CONTROLLER_EPOCH, L.CONFIG_CHANGES, "/config/topics", L.DELETE_TOPICS,
                         L.PRODUCER_ID_BLOCK, "/cluster/id", "/kafka-acl", "/kafka-acl-changes", L.ISR_CHANGE):
                assert _secured(await anonymous.get_acl(path), world_readable=True), path

        async with zk_connect(zk_server) as root:
            # The chroot itself, made by the brokers, is secured as Kafka secures it.
            assert _secured(await root.get_acl(CHROOT), world_readable=True)
            await _refused("a znode beside the brokers' in the chroot", root.create(f"{CHROOT}/admin/x", b""))

        # A writer with the credentials (the tools' users of /config/users/<user>) makes a credential
        # znode; nobody else can read it.
        creds = ZkCredentials(USER, PASSWORD)
        async with _client(connect, creds, secure=True) as writer:
            await writer.create("/config/users/alice", b'{"version":1,"config":{}}', make_parents=True)
            assert _secured(await writer.get_acl("/config/users/alice"), world_readable=False)
            assert _secured(await writer.get_acl("/config/brokers/<default>"), world_readable=False)
        async with zk_connect(connect) as anonymous:
            await _refused("reading /config/users/alice", anonymous.get("/config/users/alice"))
            await _refused("listing /config/users", anonymous.get_children("/config/users"))

        # Wrong credentials are another identity: they write nothing either.
        async with _client(connect, ZkCredentials(USER, "wrong"), secure=False) as wrong:
            await _refused("a notification with a wrong password", wrong.create(
                f"{L.CONFIG_CHANGES}/config_change_", b"{}", sequential=True))
            await _refused("a topic change with a wrong password", wrong.set(L.topic_path("secured"), b"{}"))
            await _refused("reading credentials with a wrong password", wrong.get("/config/users/alice"))

        # Deletion works through the brokers' own identity (the controller deletes what they made).
        deleted = topics(brokers[0].bootstrap, "--delete", "--topic", "secured")
        assert deleted.returncode == 0, deleted.stderr
        async with zk_connect(connect) as anonymous:
            async def gone() -> bool:
                try:
                    await anonymous.get(L.topic_path("secured"))
                except NoNodeError:
                    return not await anonymous.get_children(L.DELETE_TOPICS)
                return False
            await wait_for("the topic's znodes deleted", gone, 60)
        for b in brokers:
            assert PASSWORD not in b.log_path.read_text()
    finally:
        for b in brokers:
            b.stop()


class _client:
    """A started ZkClient with credentials (zk_connect has none), closed on exit."""

    def __init__(self, connect: str, creds: ZkCredentials, secure: bool) -> None:
        self.zk = ZkClient(connect, 4000, credentials=creds, secure_acls=secure)

    async def __aenter__(self) -> ZkClient:
        await self.zk.start()
        return self.zk

    async def __aexit__(self, *exc: object) -> None:
        await self.zk.close()


async def test_authentication_outlives_a_zookeeper_restart(zk_server: ZooKeeperServer) -> None:
    # ZooKeeper keeps authentication per connection: a session resumed on a new connection
    # must authenticate again before its first write, or that write would be refused.
    async with _client(zk_server.connect_string, ZkCredentials(USER, PASSWORD), secure=True) as zk:
        await zk.create("/admin/a", b"", make_parents=True)
        session = zk.session_id
        zk_server.restart()
        await zk.create("/admin/b", b"")  # CREATE on /admin: only for the digest identity
        await zk.set("/admin/a", b"again")
        assert zk.session_id == session  # the same session, on a new connection
        zk_server.stop()
        pending = asyncio.create_task(zk.create("/admin/c", b""))
        await asyncio.sleep(0.5)
        zk_server.start()
        assert await asyncio.wait_for(pending, 30) == "/admin/c"
        assert sorted(await zk.get_children("/admin")) == ["a", "b", "c"]


async def test_security_migration_secures_and_unsecures_existing_znodes(tmp_path: Path,
                                                                       zk_server: ZooKeeperServer) -> None:
    connect = zk_server.connect_string + CHROOT
    env = _kafka_opts(tmp_path)
    # A tree written before zookeeper.set.acl: every znode open.
    async with zk_connect(connect) as before:
        await before.create(L.topic_path("old"), b'{"version":1,"partitions":{"0":[1]}}', make_parents=True)
        await before.create("/config/users/alice", b'{"version":1,"config":{}}', make_parents=True)
        await before.create(f"{L.CONFIG_CHANGES}/config_change_", b"{}", sequential=True, make_parents=True)

    # No credentials: refused, as Kafka's tool refuses without a JAAS file.
    refused = minibroker("zookeeper-security-migration", "--zookeeper.acl", "secure", "--zookeeper.connect", connect,
                         env={"KAFKA_OPTS": ""})
    assert refused.returncode != 0 and "JAAS" in refused.stderr
    secured = minibroker("zookeeper-security-migration", "--zookeeper.acl", "secure", "--zookeeper.connect", connect,
                         env=env)
    assert secured.returncode == 0, secured.stderr
    assert "/controller" in secured.stdout  # missing roots are reported (the controller is not created)
    async with zk_connect(connect) as anonymous:
        assert (await anonymous.get(L.topic_path("old")))[0]
        assert _secured(await anonymous.get_acl(L.topic_path("old")), world_readable=True)
        assert _secured(await anonymous.get_acl("/"), world_readable=True)  # the chroot's root
        await _refused("a topic change", anonymous.set(L.topic_path("old"), b"{}"))
        await _refused("a notification", anonymous.create(f"{L.CONFIG_CHANGES}/config_change_", b"{}",
                                                          sequential=True))
        await _refused("reading credentials", anonymous.get("/config/users/alice"))
        await _refused("a new root in the chroot", anonymous.create("/elsewhere", b""))
        assert not await anonymous.exists(L.CONTROLLER)
        assert await anonymous.exists("/admin")  # missing roots are made, secured

    unsecured = minibroker("zookeeper-security-migration", "--zookeeper.acl", "unsecure", "--zookeeper.connect",
                           connect, env=env)
    assert unsecured.returncode == 0, unsecured.stderr
    async with zk_connect(connect) as anonymous:
        assert await anonymous.get_acl("/config/users/alice") == (ZnodeAcl(ALL, "world", "anyone"),)
        await anonymous.set(L.topic_path("old"), b"{}")
