"""broker.config_env and build_config's environment layer: the Kafka images' KAFKA_* convention."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, build_config
from broker.config_env import properties_from_env, property_name


@pytest.mark.parametrize(("variable", "key"), [
    ("KAFKA_BROKER_ID", "broker.id"),
    ("KAFKA_ZOOKEEPER_CONNECT", "zookeeper.connect"),
    ("KAFKA_ADVERTISED_LISTENERS", "advertised.listeners"),
    ("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "listener.security.protocol.map"),
    ("KAFKA_INTER_BROKER_LISTENER_NAME", "inter.broker.listener.name"),
    ("KAFKA_LISTENER_NAME_INTERNAL_SSL_KEYSTORE__TYPE", "listener.name.internal.ssl.keystore_type"),
    ("KAFKA_SOME___DASHED_KEY", "some-dashed.key"),
    ("KAFKA_A____B", "a-.b"),  # runs longer than three: threes first, left to right
])
def test_variable_names_map_to_property_keys(variable: str, key: str) -> None:
    assert property_name(variable) == key


@pytest.mark.parametrize("variable", ["KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_", "PATH",
                                      "kafka_broker_id", "KAFKA_LOG4J_ROOT_LOGLEVEL"])
def test_jvm_and_foreign_variables_are_not_properties(variable: str) -> None:
    assert property_name(variable) is None


def test_properties_from_env_keeps_the_variable_for_messages() -> None:
    env = {"KAFKA_BROKER_ID": "3", "HOME": "/root", "KAFKA_HEAP_OPTS": "-Xmx1g"}
    assert properties_from_env(env) == {"broker.id": ("3", "KAFKA_BROKER_ID")}


def test_environment_overrides_the_file_and_overrides_win() -> None:
    props = {"broker.id": "1", "num.partitions": "2", "zookeeper.connect": "file:2181"}
    env = {"KAFKA_NUM_PARTITIONS": "5", "KAFKA_ZOOKEEPER_CONNECT": "zookeeper:2181"}
    cfg = build_config(props, ["num.partitions=7"], env)
    assert cfg.num_partitions == 7
    assert cfg.zookeeper_connect == "zookeeper:2181"


def test_unknown_variable_is_an_unknown_key_not_an_error() -> None:
    cfg = build_config({"broker.id": "1"}, environ={"KAFKA_NO_SUCH_THING": "x"})
    assert cfg.unknown_keys == ["no.such.thing"]


def test_malformed_value_names_the_key_and_the_variable() -> None:
    with pytest.raises(ConfigError) as e:
        build_config({"broker.id": "1"}, environ={"KAFKA_NUM_PARTITIONS": "many"})
    assert e.value.key == "num.partitions"
    assert "num.partitions" in str(e.value) and "KAFKA_NUM_PARTITIONS" in str(e.value)


def test_malformed_value_from_the_file_does_not_blame_a_variable() -> None:
    with pytest.raises(ConfigError) as e:
        build_config({"broker.id": "x"}, environ={})
    assert "KAFKA_" not in str(e.value)
