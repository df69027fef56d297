"""SASL, pure parts: the session's states (Kafka 2.8's SaslServerAuthenticator, KIP-368 on a fake
clock), PLAIN and SCRAM servers against scramp's and our own clients, the JAAS reader, and Kafka's
stored credential format checked against scramp's independent derivation."""

from __future__ import annotations

import base64

import pytest
import scramp

from broker.security.sasl_jaas import JaasError, parse_jaas_config
from broker.security.sasl_listeners import SaslConfigError, SaslListeners, mechanisms_of
from broker.security.sasl_scram import CredentialCache
from broker.security.sasl_session import State, Verdict
from broker.zk.config_entities import InvalidConfig, validate
from broker.zk.scram_credentials import ScramCredential, from_password, new_salt, parse_password_spec
from fetcher.sasl_client import PlainClient, ScramClient
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Conn:
    def __init__(self, listener: str = "SASL", protocol: str = "SASL_PLAINTEXT") -> None:
        self.listener_name = listener
        self.security_protocol = protocol
        self.peer = "127.0.0.1:1"


def listeners(clock: Clock, **extra: str) -> SaslListeners:
    props = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "sasl.jaas.config": JAAS, **extra}
    cache = CredentialCache()
    cache.set_user("bob", {"SCRAM-SHA-512": from_password("SCRAM-SHA-512", "bob-secret").to_config(),
                           "SCRAM-SHA-256": from_password("SCRAM-SHA-256", "bob-secret", 8192).to_config()})
    return SaslListeners({"SASL": "SASL_PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}, lambda _l, k: props.get(k), cache,
                         clock=clock)


def run(session, client, version: int = 1):  # noqa: ANN001, ANN201
    challenge = None
    result = None
    while (token := client.next_token(challenge)) is not None:
        result = session.authenticate(token, version)
        if result.error:
            return result
        challenge = result.token
    return result


def test_plain_success_and_principal() -> None:
    s = listeners(Clock()).session(Conn())
    assert s is not None
    assert s.gate(ApiKey.API_VERSIONS) is Verdict.PASS
    assert s.gate(ApiKey.SASL_HANDSHAKE) is Verdict.PASS
    hs = s.handshake("PLAIN")
    assert (hs.error, hs.mechanisms) == (ErrorCode.NONE, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    r = run(s, PlainClient("alice", "alice-secret"))
    assert r.error == ErrorCode.NONE and r.principal == "User:alice" and r.session_lifetime_ms == 0
    assert s.gate(ApiKey.PRODUCE) is Verdict.PASS


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("nobody", "alice-secret")])
def test_plain_failure_is_kafkas_message(user: str, password: str) -> None:
    s = listeners(Clock()).session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    r = s.authenticate(b"\x00" + user.encode() + b"\x00" + password.encode(), 1)
    assert (r.error, r.message, r.failed) == (ErrorCode.SASL_AUTHENTICATION_FAILED,
                                              "Authentication failed: Invalid username or password", True)
    assert s.state is State.FAILED and s.gate(ApiKey.METADATA) is Verdict.CLOSE


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_our_client(mechanism: str) -> None:
    s = listeners(Clock()).session(Conn())
    assert s is not None
    s.handshake(mechanism)
    r = run(s, ScramClient(mechanism, "bob", "bob-secret"))
    assert r.principal == "User:bob"


def test_scram_wrong_password_and_unknown_user_get_the_generic_message() -> None:
    for user, password in (("bob", "nope"), ("carol", "x")):
        s = listeners(Clock()).session(Conn())
        assert s is not None
        s.handshake("SCRAM-SHA-512")
        r = run(s, ScramClient("SCRAM-SHA-512", user, password))
        assert r.error == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert r.message == ("Authentication failed during authentication due to invalid credentials with "
                             "SASL mechanism SCRAM-SHA-512")
        assert password not in (r.message or "")


def test_unsupported_mechanism_lists_the_enabled_ones() -> None:
    s = listeners(Clock()).session(Conn())
    assert s is not None
    hs = s.handshake("GSSAPI")
    assert (hs.error, hs.failed) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, True)
    assert hs.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_gate_before_authentication() -> None:
    sl = listeners(Clock())
    s = sl.session(Conn())
    assert s is not None
    assert s.gate(ApiKey.METADATA) is Verdict.CLOSE_AFTER_DELAY  # IllegalSaslState: delayed close
    s = sl.session(Conn())
    assert s is not None
    assert s.gate(ApiKey.API_VERSIONS) is Verdict.PASS
    assert s.gate(ApiKey.API_VERSIONS) is Verdict.CLOSE  # Kafka's IllegalStateException
    s = sl.session(Conn())
    assert s is not None
    assert s.gate(ApiKey.SASL_AUTHENTICATE) is Verdict.CLOSE_AFTER_DELAY  # before the handshake
    s = sl.session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    assert s.gate(ApiKey.PRODUCE) is Verdict.CLOSE_AFTER_DELAY  # mid-exchange


def test_frame_size_bound_before_authentication() -> None:
    """`admit_frame` sees the size prefix before the body is read: Kafka's NetworkReceive bound
    (`size > sasl.server.max.receive.size`), an authentication failure, in every state before
    COMPLETE and during re-authentication; none after authentication."""
    clock = Clock()
    sl = listeners(clock)
    s = sl.session(Conn())
    assert s is not None
    assert s.admit_frame(524288) is Verdict.PASS  # at the bound: read
    assert s.admit_frame(524289) is Verdict.CLOSE_AFTER_DELAY  # first frame, above it: refused unread
    assert s.state is State.FAILED and s.admit_frame(10) is Verdict.CLOSE
    s = sl.session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    assert s.admit_frame(50 << 20) is Verdict.CLOSE_AFTER_DELAY  # mid-exchange
    small = listeners(clock, **{"sasl.server.max.receive.size": "100"}).session(Conn())
    assert small is not None
    assert small.admit_frame(100) is Verdict.PASS and small.admit_frame(101) is Verdict.CLOSE_AFTER_DELAY
    s = listeners(clock, **{"connections.max.reauth.ms": "1000"}).session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    run(s, PlainClient("alice", "alice-secret"))
    assert s.admit_frame(100 << 20) is Verdict.PASS  # authenticated: socket.request.max.bytes is the bound
    clock.now += 2
    assert s.handshake("PLAIN").error == ErrorCode.NONE and s.reauthenticating
    assert s.admit_frame(524289) is Verdict.CLOSE_AFTER_DELAY  # re-authenticating: bounded again


def test_a_negative_size_prefix_before_authentication_is_an_authentication_failure() -> None:
    """Kafka's NetworkReceive throws InvalidReceiveException for a negative size as for one above
    its bound; the SASL authenticator fails the authentication on either. After authentication a
    negative size is the listener's bad frame (closed at once), not the session's."""
    clock = Clock()
    sl = listeners(clock)
    s = sl.session(Conn())
    assert s is not None
    assert s.admit_frame(-1) is Verdict.CLOSE_AFTER_DELAY
    assert s.state is State.FAILED
    s = sl.session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    run(s, PlainClient("alice", "alice-secret"))
    assert s.admit_frame(-1) is Verdict.PASS


def test_handshake_v0_refused_and_no_session_on_other_listeners() -> None:
    sl = listeners(Clock())
    assert sl.session(Conn("PLAINTEXT", "PLAINTEXT")) is None
    s = sl.session(Conn())
    assert s is not None
    hs = s.handshake("PLAIN", 0)
    assert (hs.error, hs.failed) == (ErrorCode.ILLEGAL_SASL_STATE, True)


def test_after_authentication_sasl_requests_are_illegal_state() -> None:
    s = listeners(Clock()).session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    run(s, PlainClient("alice", "alice-secret"))
    r = s.authenticate(b"x", 1)
    assert (r.error, r.failed) == (ErrorCode.ILLEGAL_SASL_STATE, False)
    hs = s.handshake("PLAIN")  # no session lifetime: no re-authentication
    assert (hs.error, hs.failed) == (ErrorCode.ILLEGAL_SASL_STATE, False)


def test_reauthentication_kip368() -> None:
    clock = Clock()
    s = listeners(clock, **{"connections.max.reauth.ms": "5000"}).session(Conn())
    assert s is not None
    s.handshake("SCRAM-SHA-512")
    r = run(s, ScramClient("SCRAM-SHA-512", "bob", "bob-secret"))
    assert r.session_lifetime_ms == 5000
    clock.now += 4.9
    assert s.gate(ApiKey.FETCH) is Verdict.PASS
    clock.now += 0.2  # expired: anything but a re-authentication closes
    assert s.gate(ApiKey.FETCH) is Verdict.CLOSE
    assert s.gate(ApiKey.SASL_HANDSHAKE) is Verdict.PASS
    assert s.handshake("SCRAM-SHA-512").error == ErrorCode.NONE
    assert s.reauthenticating and s.gate(ApiKey.SASL_AUTHENTICATE) is Verdict.PASS
    r = run(s, ScramClient("SCRAM-SHA-512", "bob", "bob-secret"))
    assert r.principal == "User:bob" and r.session_lifetime_ms == 5000
    assert s.gate(ApiKey.FETCH) is Verdict.PASS
    clock.now += 0.5  # at most one start a second
    assert s.handshake("SCRAM-SHA-512").error == ErrorCode.ILLEGAL_SASL_STATE


def test_reauthentication_cannot_change_principal_or_mechanism() -> None:
    clock = Clock()
    sl = listeners(clock, **{"connections.max.reauth.ms": "1000"})
    s = sl.session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    run(s, PlainClient("alice", "alice-secret"))
    clock.now += 2
    s.handshake("PLAIN")
    r = run(s, PlainClient("admin", "admin-secret"))
    assert r.error == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert r.message == "Cannot change principals during re-authentication from User:alice: User:admin"
    s = sl.session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    run(s, PlainClient("alice", "alice-secret"))
    clock.now += 2
    assert s.handshake("SCRAM-SHA-512").error == ErrorCode.NONE
    r = s.authenticate(b"n,,n=alice,r=abc", 1)
    assert r.error == ErrorCode.SASL_AUTHENTICATION_FAILED and "re-authentication of mechanism 'PLAIN'" in (r.message or "")


def test_v0_authenticate_clients_get_no_session_lifetime() -> None:
    s = listeners(Clock(), **{"connections.max.reauth.ms": "1000"}).session(Conn())
    assert s is not None
    s.handshake("PLAIN")
    r = run(s, PlainClient("alice", "alice-secret"), version=0)
    assert r.session_lifetime_ms == 0 and s.expires_at is None


def test_stored_credential_matches_scramps_derivation() -> None:
    salt = new_salt()
    assert salt.isalnum() and salt == salt.lower()
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        mine = from_password(mechanism, "pässwörd", 4096, salt)
        s, stored, server, i = scramp.ScramMechanism(mechanism).make_auth_info("pässwörd", 4096, salt)
        assert (mine.salt, mine.stored_key, mine.server_key, mine.iterations) == (s, stored, server, i)
        text = mine.to_config()
        assert text.startswith(f"salt={base64.b64encode(salt).decode()},stored_key=") and text.endswith(",iterations=4096")
        assert ScramCredential.from_config(text) == mine
        assert "pässwörd" not in text and "stored_key" not in repr(mine)


def test_credential_values_validated_without_echo() -> None:
    validate("users", {"SCRAM-SHA-512": from_password("SCRAM-SHA-512", "x").to_config()})
    with pytest.raises(InvalidConfig) as e:
        validate("users", {"SCRAM-SHA-512": "salt=AAAA,secret-looking-thing"})
    assert "secret-looking-thing" not in str(e.value)


def test_password_spec_as_config_command() -> None:
    assert parse_password_spec("SCRAM-SHA-512", "password=a,b=c") == (4096, "a,b=c")
    assert parse_password_spec("SCRAM-SHA-256", "iterations=8192,password=p") == (8192, "p")
    with pytest.raises(ValueError, match="less than the minimum 4096"):
        parse_password_spec("SCRAM-SHA-256", "iterations=100,password=p")
    with pytest.raises(ValueError) as e:
        parse_password_spec("SCRAM-SHA-256", "pass=hunter2")
    assert "hunter2" not in str(e.value)


def test_jaas_reader() -> None:
    entry = parse_jaas_config(JAAS)
    assert entry.flag == "required" and entry.users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert entry.client_credentials == ("admin", "admin-secret")
    assert "admin-secret" not in repr(entry)
    for bad in ("org.Foo required a=\"b\"", "org.Foo a=\"b\";", JAAS + JAAS):
        with pytest.raises(JaasError) as e:
            parse_jaas_config(bad)
        assert "admin-secret" not in str(e.value)


def test_enabled_mechanisms_refuse_unserved_ones_naming_the_key() -> None:
    assert mechanisms_of("SCRAM-SHA-512, PLAIN") == ("SCRAM-SHA-512", "PLAIN")
    with pytest.raises(SaslConfigError, match="sasl.enabled.mechanisms: GSSAPI not served"):
        mechanisms_of(None)
    with pytest.raises(SaslConfigError, match="OAUTHBEARER"):
        mechanisms_of("PLAIN,OAUTHBEARER")


@pytest.mark.parametrize(("extra", "key"), [
    ({}, "sasl.enabled.mechanisms"),
    ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,GSSAPI"},
     "listener.name.sasl_plaintext.sasl.enabled.mechanisms"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "SCRAM-SHA-512", "connections.max.reauth.ms": "soon"}, "connections.max.reauth.ms"),
])
def test_broker_config_refuses_unusable_sasl_settings_naming_the_key(extra: dict[str, str], key: str) -> None:
    from broker.config import ConfigError, build_config
    props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093", **extra}
    with pytest.raises(ConfigError) as e:
        build_config(props)
    assert e.value.key == key


def test_broker_config_reads_sasl_settings_per_listener() -> None:
    from broker.config import build_config
    from broker.security.inter_broker import inter_broker_security
    cfg = build_config({
        "broker.id": "0", "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.external.plain.sasl.jaas.config": JAAS,
        "listener.name.external.connections.max.reauth.ms": "60000",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-pw";',
    })
    sl = SaslListeners({"INTERNAL": "SASL_PLAINTEXT", "EXTERNAL": "SASL_PLAINTEXT"}, cfg.listener_setting,
                       CredentialCache())
    assert sl.settings["INTERNAL"].mechanisms == ("SCRAM-SHA-512",) and sl.settings["INTERNAL"].reauth_ms == 0
    assert sl.settings["EXTERNAL"].mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert sl.settings["EXTERNAL"].reauth_ms == 60000
    client = inter_broker_security(cfg, "INTERNAL", "SASL_PLAINTEXT")
    assert (client.sasl_mechanism, client.sasl_username, client.sasl_password) == ("SCRAM-SHA-512", "broker", "b-pw")
    assert "b-pw" not in repr(client) and "admin-secret" not in repr(cfg)
