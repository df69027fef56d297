"""zookeeper.set.acl: the ACL each znode gets (Kafka 2.8's ZkData.defaultAcls), the JAAS file the
credentials come from, and the broker's start-up rule (broker.zk.znode_acls, broker.zk.jaas, config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, build_config
from broker.zk import layout as L
from broker.zk.acl_store import EXTENDED_CHANGES, EXTENDED_ROOT, LITERAL_CHANGES, LITERAL_ROOT
from broker.zk.cluster_id import CLUSTER_ID_PATH
from broker.zk.jaas import JaasError, ZkCredentials, credentials_from_env, jvm_properties, parse_jaas
from broker.zk.znode_acls import (
    ALL,
    CREATOR_ALL,
    OPEN,
    READ,
    WORLD_READ,
    ZnodeAcl,
    default_acls,
    is_sensitive,
)

SECURE = (CREATOR_ALL, WORLD_READ)

# Every path the brokers and the tools create (or their shape), with what Kafka 2.8 gives it.
PATHS = [
    (L.BROKER_IDS, SECURE), (L.broker_path(1), SECURE), (L.topic_path("t"), SECURE),
    (L.partition_state_path("t", 0), SECURE), (L.BROKER_SEQID, SECURE),
    (L.CONTROLLER, SECURE), (L.CONTROLLER_EPOCH, SECURE),
    (L.ISR_CHANGE, SECURE), (f"{L.ISR_CHANGE}/isr_change_", SECURE),
    (L.DELETE_TOPICS, SECURE), (f"{L.DELETE_TOPICS}/t", SECURE), (L.REASSIGN, SECURE), ("/admin", SECURE),
    (L.CONFIG_ROOT, SECURE), (L.CONFIG_CHANGES, SECURE), (f"{L.CONFIG_CHANGES}/config_change_", SECURE),
    ("/config/topics/t", SECURE), ("/config/clients/c", SECURE), ("/config/clients/<default>", SECURE),
    ("/config/ips", SECURE),
    (L.PRODUCER_ID_BLOCK, SECURE), (L.LOG_DIR_EVENT, SECURE), (f"{L.LOG_DIR_EVENT}/log_dir_event_", SECURE),
    ("/cluster", SECURE), (CLUSTER_ID_PATH, SECURE),
    (LITERAL_ROOT, SECURE), (f"{LITERAL_ROOT}/Topic/t", SECURE), (LITERAL_CHANGES, SECURE),
    (f"{LITERAL_CHANGES}/acl_changes_", SECURE), (f"{EXTENDED_ROOT}/prefixed/Topic/t", SECURE),
    (EXTENDED_CHANGES, SECURE), ("/kafka", SECURE),  # a chroot
    # Sensitive: credentials and broker passwords, not even readable by others.
    ("/config/users", (CREATOR_ALL,)), ("/config/users/alice", (CREATOR_ALL,)),
    ("/config/users/alice/clients/c", (CREATOR_ALL,)), ("/config/users/<default>", (CREATOR_ALL,)),
    ("/config/brokers", (CREATOR_ALL,)), ("/config/brokers/0", (CREATOR_ALL,)),
    ("/config/brokers/<default>", (CREATOR_ALL,)), ("/delegation_token/tokens/x", (CREATOR_ALL,)),
    # The old consumers' root stays open for them; what is under it does not.
    (L.CONSUMERS, OPEN), (f"{L.CONSUMERS}/g", SECURE),
]


@pytest.mark.parametrize(("path", "acls"), PATHS)
def test_secure_acls_per_path(path: str, acls: tuple[ZnodeAcl, ...]) -> None:
    assert default_acls(path, secure=True) == acls


@pytest.mark.parametrize("path", [p for p, _ in PATHS])
def test_without_set_acl_every_znode_is_open(path: str) -> None:
    assert default_acls(path, secure=False) == ((ZnodeAcl(ALL, "world", "anyone")),)


def test_the_acls_are_zookeepers_ids() -> None:
    # ZooDefs.Ids.CREATOR_ALL_ACL (the server expands `auth` to the creator's identities) and READ_ACL_UNSAFE.
    assert CREATOR_ALL == ZnodeAcl(31, "auth", "")
    assert WORLD_READ == ZnodeAcl(READ, "world", "anyone")


def test_sensitive_is_a_prefix_match_as_kafka_s() -> None:
    assert is_sensitive("/config/usersx")  # Kafka's startsWith
    assert not is_sensitive("/config/topics/users")
    assert not is_sensitive("/config")


JAAS = """
// ZooKeeper's login for brokers and tools
KafkaServer {
  org.apache.kafka.common.security.plain.PlainLoginModule required
  username="admin" password="admin-secret" user_admin="admin-secret";
};
/* the section ZooKeeper's client reads */
Client {
  org.apache.zookeeper.server.auth.DigestLoginModule required
  username="kafka"
  password="kafka \\"secret\\"";
};
Other { com.example.Krb5 optional useKeyTab=true principal=x; };
"""


def test_parse_jaas_sections_modules_and_options() -> None:
    sections = parse_jaas(JAAS)
    assert list(sections) == ["KafkaServer", "Client", "Other"]
    (client,) = sections["Client"]
    assert client.class_name == "org.apache.zookeeper.server.auth.DigestLoginModule"
    assert client.flag == "required"
    assert client.options == {"username": "kafka", "password": 'kafka "secret"'}
    assert sections["Other"][0].options == {"useKeyTab": "true", "principal": "x"}


@pytest.mark.parametrize("text", ["Client {", "Client { m required username=; };", "Client { m maybe; };",
                                  "Client { m required a=b }", "{ };"])
def test_malformed_jaas_is_refused(text: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas(text)


def test_jvm_properties_from_kafka_opts() -> None:
    opts = "-Xmx1g -Djava.security.auth.login.config='/etc/kafka/my jaas.conf' -Dzookeeper.sasl.clientconfig=ZkClient"
    assert jvm_properties(opts) == {"java.security.auth.login.config": "/etc/kafka/my jaas.conf",
                                    "zookeeper.sasl.clientconfig": "ZkClient"}


def _env(path: Path, *extra: str) -> dict[str, str]:
    return {"KAFKA_OPTS": " ".join((f"-Djava.security.auth.login.config={path}", *extra))}


def test_credentials_from_the_client_section(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    creds = credentials_from_env(_env(jaas))
    assert creds is not None
    assert (creds.username, creds.password) == ("kafka", 'kafka "secret"')
    assert creds.digest_auth() == b'kafka:kafka "secret"'
    assert "secret" not in repr(creds)
    # Another section by name; a file without it, or no file named, means no authentication.
    renamed = credentials_from_env(_env(jaas, "-Dzookeeper.sasl.clientconfig=KafkaServer"))
    assert renamed is not None and renamed.username == "admin"
    assert credentials_from_env(_env(jaas, "-Dzookeeper.sasl.clientconfig=Missing")) is None
    assert credentials_from_env({}) is None
    assert credentials_from_env({"KAFKA_OPTS": "-Xmx1g"}) is None


def test_unusable_credentials_are_refused_without_naming_the_password(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    with pytest.raises(JaasError, match="Kerberos"):
        credentials_from_env(_env(jaas, "-Dzookeeper.sasl.clientconfig=Other"))
    with pytest.raises(JaasError, match="zookeeper.sasl.client"):
        credentials_from_env(_env(jaas, "-Dzookeeper.sasl.client=false"))
    with pytest.raises(JaasError, match="cannot read"):
        credentials_from_env(_env(tmp_path / "absent.conf"))
    colon = tmp_path / "colon.conf"
    colon.write_text('Client { m required username="a:b" password="pw-xyz"; };')
    with pytest.raises(JaasError) as refused:
        credentials_from_env(_env(colon))
    assert "pw-xyz" not in str(refused.value)


def test_set_acl_needs_credentials_to_start(tmp_path: Path) -> None:
    props = {"broker.id": "0", "zookeeper.set.acl": "true"}
    with pytest.raises(ConfigError, match="zookeeper.set.acl"):
        build_config(props, environ={})
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    cfg = build_config(props, environ=_env(jaas))
    assert cfg.zookeeper_set_acl
    assert cfg.zookeeper_credentials == ZkCredentials("kafka", 'kafka "secret"', f"{jaas} [Client]")
    assert "secret" not in repr(cfg)
    # As Kafka: credentials present authenticate even without set.acl (znodes then stay open).
    plain = build_config({"broker.id": "0"}, environ=_env(jaas))
    assert not plain.zookeeper_set_acl and plain.zookeeper_credentials is not None
    with pytest.raises(ConfigError, match="java.security.auth.login.config"):
        build_config({"broker.id": "0"}, environ=_env(tmp_path / "absent.conf"))
