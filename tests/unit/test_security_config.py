"""Listener security settings (issue 20): security.inter.broker.protocol's rules, the
`listener.name.<name>.` prefix, TLS values refused naming the key, and client properties
(`--command-config`) read into a ClientSecurity."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, build_config
from fetcher.security import ClientSecurity, SecurityConfigError

TWO = {
    "broker.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    "ssl.keystore.location": "/etc/kafka/broker.pem",
}


def test_security_inter_broker_protocol_names_the_inter_broker_listener() -> None:
    cfg = build_config({**TWO, "security.inter.broker.protocol": "ssl"})
    assert cfg.inter_broker_listener_name == "SSL"
    assert cfg.inter_broker_protocol == "SSL"
    assert build_config(TWO).inter_broker_protocol == "PLAINTEXT"


def test_security_keys_are_known_and_kept_out_of_described_values() -> None:
    cfg = build_config({**TWO, "ssl.key.password": "secret", "listener.name.ssl.ssl.client.auth": "required",
                        "ssl.truststore.location": "/etc/kafka/ca.pem"})
    assert "ssl.key.password" not in cfg.given
    assert not cfg.unknown_keys
    assert "secret" not in repr(cfg)


def test_a_listener_setting_prefers_its_listener_name_prefix() -> None:
    cfg = build_config({**TWO, "ssl.client.auth": "none", "listener.name.ssl.ssl.client.auth": "requested",
                        "ssl.truststore.location": "/etc/kafka/ca.pem"})
    assert cfg.listener_setting("SSL", "ssl.client.auth") == "requested"
    assert cfg.listener_setting_key("SSL", "ssl.client.auth") == "listener.name.ssl.ssl.client.auth"
    assert cfg.listener_setting("PLAINTEXT", "ssl.client.auth") == "none"
    assert cfg.listener_setting("PLAINTEXT", "ssl.keystore.type", "PEM") == "PEM"


@pytest.mark.parametrize("change,key,why", [
    ({"listener.name.ssl.ssl.client.auth": "sometimes"}, "listener.name.ssl.ssl.client.auth", "one of"),
    ({"ssl.client.auth": "required"}, "ssl.client.auth", "truststore"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols", "TLSv1.1"),
    ({"ssl.enabled.protocols": ""}, "ssl.enabled.protocols", "no protocol"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type", "JKS stores are not supported; convert the store to PKCS12"),
    ({"listener.name.ssl.ssl.truststore.type": "jks"}, "listener.name.ssl.ssl.truststore.type", "-deststoretype PKCS12"),
    ({"ssl.truststore.type": "BCFKS"}, "ssl.truststore.type", "PEM or PKCS12"),
    ({"ssl.keystore.type": "PKCS12"}, "ssl.keystore.password", "needs its password"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "a", "ssl.key.password": "b"}, "ssl.key.password",
     "one password"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "a", "ssl.keystore.key": "-----BEGIN"},
     "ssl.keystore.key", "PEM"),
    ({"ssl.truststore.type": "PKCS12", "ssl.truststore.certificates": "-----BEGIN"}, "ssl.truststore.certificates",
     "PEM"),
    ({"ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/X,oops"}, "ssl.principal.mapping.rules", "invalid rule"),
    ({"ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----"}, "ssl.keystore.location", "not both"),
    ({"ssl.endpoint.identification.algorithm": "ldap"}, "ssl.endpoint.identification.algorithm", "https"),
    ({"listener.name.ssl.ssl.keystore.password": "pw"}, "listener.name.ssl.ssl.keystore.password", "ssl.key.password"),
])
def test_bad_tls_settings_stop_start_up_naming_the_key(change: dict[str, str], key: str, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config({**TWO, **change})
    assert e.value.key == key
    assert why in str(e.value)


def test_pkcs12_stores_are_read_with_their_passwords() -> None:
    from broker.security.ssl_settings import listener_ssl_settings
    cfg = build_config({**TWO, "ssl.keystore.type": "pkcs12", "ssl.keystore.password": "store-pw",
                        "ssl.key.password": "store-pw", "listener.name.ssl.ssl.truststore.type": "PKCS12",
                        "ssl.truststore.location": "/etc/kafka/trust.p12", "ssl.truststore.password": "trust-pw"})
    tls = listener_ssl_settings(cfg, "SSL")
    assert (tls.keystore_type, tls.keystore_password, tls.truststore_type, tls.truststore_password) == \
        ("PKCS12", "store-pw", "PKCS12", "trust-pw")
    assert "store-pw" not in repr(tls) and "trust-pw" not in repr(tls)
    # A PKCS12 trust store without its password: allowed (Kafka reads it without an integrity check).
    cfg = build_config({**TWO, "ssl.truststore.type": "PKCS12", "ssl.truststore.location": "/etc/kafka/trust.p12"})
    assert listener_ssl_settings(cfg, "SSL").truststore_password is None


def test_an_inline_keystore_needs_chain_and_key() -> None:
    props = {**TWO, "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"}
    del props["ssl.keystore.location"]
    with pytest.raises(ConfigError) as e:
        build_config(props)
    assert e.value.key == "ssl.keystore.certificate.chain"
    assert "BEGIN" not in str(e.value)


def test_client_properties() -> None:
    sec = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
        "ssl.keystore.location": "/me.pem", "ssl.key.password": "kpw", "ssl.endpoint.identification.algorithm": "",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="alice" password="al\\"ice";',
    })
    assert (sec.security_protocol, sec.uses_tls, sec.uses_sasl, sec.check_hostname) == ("SASL_SSL", True, True, False)
    assert (sec.ssl_truststore_location, sec.ssl_keystore_location, sec.ssl_key_password) == ("/ca.pem", "/me.pem", "kpw")
    assert (sec.sasl_mechanism, sec.sasl_username, sec.sasl_password) == ("SCRAM-SHA-512", "alice", 'al"ice')
    assert "kpw" not in repr(sec) and "ice" not in repr(sec).replace("alice", "")
    plain = ClientSecurity.from_properties({"sasl.username": "bob", "sasl.password": "pw"})
    assert (plain.security_protocol, plain.sasl_username, plain.sasl_password) == ("PLAINTEXT", "bob", "pw")
    assert ClientSecurity.from_properties({}).ssl_context() is None
    p12 = ClientSecurity.from_properties({
        "security.protocol": "SSL", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/me.p12",
        "ssl.keystore.password": "spw", "ssl.truststore.type": "PKCS12", "ssl.truststore.location": "/ca.p12",
        "ssl.truststore.password": "tpw"})
    assert (p12.ssl_keystore_type, p12.ssl_keystore_password, p12.ssl_truststore_type, p12.ssl_truststore_password) \
        == ("PKCS12", "spw", "PKCS12", "tpw")
    assert "spw" not in repr(p12) and "tpw" not in repr(p12)


@pytest.mark.parametrize("props,key", [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/me.p12"}, "ssl.keystore.password"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/me.p12", "ssl.keystore.password": "a",
      "ssl.key.password": "b"}, "ssl.key.password"),
    ({"ssl.keystore.password": "x"}, "ssl.keystore.password"),
    ({"ssl.truststore.password": "x"}, "ssl.truststore.password"),
    ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
    ({"ssl.keystore.key": "x"}, "ssl.keystore.certificate.chain"),
    ({"sasl.jaas.config": 'x required username="a" password="b"'}, "sasl.jaas.config"),
])
def test_bad_client_properties_name_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(SecurityConfigError) as e:
        ClientSecurity.from_properties(props)
    assert e.value.key == key


def test_sasl_ssl_takes_ssl_client_auth_only_with_its_listener_prefix() -> None:
    """KIP-684 (Kafka 2.8): the bare ssl.client.auth applies to SSL listeners, not to SASL_SSL ones."""
    from broker.security.ssl_settings import listener_ssl_settings
    props = {"broker.id": "1", "listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
             "security.inter.broker.protocol": "SSL", "ssl.keystore.location": "/etc/kafka/broker.pem",
             "ssl.truststore.location": "/etc/kafka/ca.pem", "ssl.client.auth": "required",
             "sasl.enabled.mechanisms": "SCRAM-SHA-512"}  # Kafka's default GSSAPI is not served
    cfg = build_config(props)
    assert listener_ssl_settings(cfg, "SSL", "SSL").client_auth == "required"
    assert listener_ssl_settings(cfg, "SASL_SSL", "SASL_SSL").client_auth == "none"
    cfg = build_config({**props, "listener.name.sasl_ssl.ssl.client.auth": "requested"})
    assert listener_ssl_settings(cfg, "SASL_SSL", "SASL_SSL").client_auth == "requested"


def test_kafka_ssl_keys_this_broker_does_not_apply_are_reported_unknown() -> None:
    cfg = build_config({**TWO, "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256", "ssl.protocol": "TLSv1.3"})
    assert sorted(cfg.unknown_keys) == ["ssl.cipher.suites", "ssl.protocol"]
