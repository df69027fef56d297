"""Named listeners: listeners, advertised.listeners, listener.security.protocol.map and
inter.broker.listener.name, checked as KafkaConfig checks them; their registration and the
metadata cache's choice of endpoint by the client's listener."""

from __future__ import annotations

import json

import pytest

from broker.config import ConfigError, build_config
from broker.metadata import MetadataCache
from broker.zk import layout as L

COMPOSE = {
    "broker.id": "1",
    "listeners": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
    "advertised.listeners": "INTERNAL://broker1:9092,EXTERNAL://localhost:19092",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def test_kafka_defaults_one_plaintext_listener() -> None:
    cfg = build_config({"broker.id": "0"})
    assert [lst.name for lst in cfg.listeners] == ["PLAINTEXT"]
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    assert cfg.listener_security_protocol_map["SSL"] == "SSL"
    assert cfg.advertised == cfg.listeners[0]


def test_named_listeners_and_the_inter_broker_endpoint() -> None:
    cfg = build_config(COMPOSE)
    assert [(lst.name, lst.port) for lst in cfg.listeners] == [("INTERNAL", 9092), ("EXTERNAL", 19092)]
    assert (cfg.advertised.host, cfg.advertised.port) == ("broker1", 9092)
    assert [lst.host for lst in cfg.advertised_endpoints] == ["broker1", "localhost"]


@pytest.mark.parametrize(("change", "key", "why"), [
    ({"listener.security.protocol.map": "INTERNAL:PLAINTEXT"}, "listener.security.protocol.map",
     "no security protocol defined for listener EXTERNAL"),
    ({"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:TLS"}, "listener.security.protocol.map",
     "unknown security protocol"),
    ({"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL"}, "ssl.keystore.location",
     "listener EXTERNAL uses TLS"),
    ({"security.inter.broker.protocol": "PLAINTEXT", "inter.broker.listener.name": "INTERNAL"},
     "security.inter.broker.protocol", "only one of"),
    ({"inter.broker.listener.name": "REPLICATION"}, "inter.broker.listener.name", "advertised.listeners"),
    ({"advertised.listeners": "INTERNAL://broker1:9092,OTHER://x:1"}, "advertised.listeners",
     "OTHER is not a listener name"),
    ({"advertised.listeners": "INTERNAL://0.0.0.0:9092"}, "advertised.listeners", "meta-address"),
    ({"listeners": "INTERNAL://:9092,EXTERNAL://:9092"}, "listeners", "different port"),
    ({"listeners": "INTERNAL://:9092,INTERNAL://:9093"}, "listeners", "different name"),
])
def test_inconsistent_listener_settings_stop_start_up_naming_the_key(change: dict[str, str], key: str,
                                                                     why: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config({**COMPOSE, **change})
    assert e.value.key == key
    assert why in str(e.value)


def _registration() -> L.BrokerInfo:
    eps = (L.Endpoint("INTERNAL", "broker1", 9092), L.Endpoint("EXTERNAL", "localhost", 19092))
    return L.BrokerInfo(1, "broker1", 9092, endpoints=eps)


def test_registration_is_kafkas_json_with_every_endpoint() -> None:
    body = json.loads(_registration().encode())
    assert body["endpoints"] == ["INTERNAL://broker1:9092", "EXTERNAL://localhost:19092"]
    assert body["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "PLAINTEXT"}
    # host/port name the PLAINTEXT listener only (Kafka's v4 body); there is none here.
    assert (body["host"], body["port"], body["version"]) == (None, -1, 4)


def test_registration_read_for_a_listener() -> None:
    data = _registration().encode()
    assert L.BrokerInfo.decode(1, data, "EXTERNAL").port == 19092
    assert L.BrokerInfo.decode(1, data, "INTERNAL").host == "broker1"
    assert L.BrokerInfo.decode(1, data).host == "broker1"  # no listener named: the first endpoint
    assert len(L.BrokerInfo.decode(1, data).endpoints) == 2


def test_a_single_plaintext_registration_keeps_host_and_port() -> None:
    body = json.loads(L.BrokerInfo(2, "127.0.0.1", 9093).encode())
    assert (body["host"], body["port"], body["endpoints"]) == ("127.0.0.1", 9093, ["PLAINTEXT://127.0.0.1:9093"])


def test_metadata_cache_answers_with_the_clients_listener() -> None:
    cache = MetadataCache(inter_broker_listener="INTERNAL")
    live = [{"id": b, "rack": None, "endpoints": [
        {"listener": "INTERNAL", "host": f"broker{b}", "port": 9092, "security_protocol": 0},
        {"listener": "EXTERNAL", "host": "localhost", "port": 19091 + b, "security_protocol": 0}]}
        for b in (1, 2, 3)]
    cache.update({"controller_id": 1, "live_brokers": live, "ungrouped_partition_states": []})
    assert cache.endpoints_for("EXTERNAL") == [(1, "localhost", 19092, None), (2, "localhost", 19093, None),
                                               (3, "localhost", 19094, None)]
    assert cache.endpoints_for("INTERNAL")[1] == (2, "broker2", 9092, None)
    assert cache.endpoints_for("PLAINTEXT") == []
    # Fetchers and controlled shutdown use host/port: the inter-broker listener's.
    assert (cache.brokers[3].host, cache.brokers[3].port) == ("broker3", 9092)
