"""The broker's SASL side: each SASL listener's settings, the connections' sessions, the SCRAM credentials.

`SaslListeners` is what the dispatcher's gate and the SaslHandshake/SaslAuthenticate handlers
share. A connection gets a `SaslSession` (broker.security.sasl_session) on its first request if
its listener's security protocol is SASL_PLAINTEXT or SASL_SSL; connections of other listeners
have none (their SASL requests get ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers them).
Sessions are held weakly by connection, so a closed connection's session goes with it.

Settings, read per listener through `setting(listener, key)` (`listener.name.<l>.<key>` over
`<key>`, the broker's per-listener reader):
- `sasl.enabled.mechanisms` (Kafka's default GSSAPI is not served: a SASL listener must name
  PLAIN, SCRAM-SHA-256 and/or SCRAM-SHA-512, else the broker refuses to start, naming the key);
- PLAIN's users from the JAAS entry: `listener.name.<l>.plain.sasl.jaas.config`, else
  `listener.name.<l>.sasl.jaas.config`, else `sasl.jaas.config` (PlainLoginModule's `user_<name>`);
- `connections.max.reauth.ms` (0), `connection.failed.authentication.delay.ms` (100),
  `sasl.server.max.receive.size` (524288).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from broker.security.sasl_jaas import JaasError, LoginModule, parse_jaas_config
from broker.security.sasl_plain import PlainServer
from broker.security.sasl_scram import CredentialCache, ScramServer
from broker.security.sasl_session import (
    MAX_RECEIVE_SIZE,
    SERVED_MECHANISMS,
    Mechanism,
    SaslListener,
    SaslSession,
)

if TYPE_CHECKING:
    from broker.metrics import Counter

log = structlog.get_logger()

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
Setting = Callable[[str, str], "str | None"]
KeyOf = Callable[[str, str], str]  # the key that supplies a setting on a listener (for messages)


def _prefixed(listener: str, key: str) -> str:
    return f"listener.name.{listener.lower()}.{key}"


class SaslConfigError(ValueError):
    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"{key}: {why}")
        self.key = key
        self.why = why


def _int(setting: Setting, key_of: KeyOf, listener: str, key: str, default: int, minimum: int = 0) -> int:
    raw = setting(listener, key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise SaslConfigError(key_of(listener, key), f"{raw!r} is not a whole number") from None
    if value < minimum:
        raise SaslConfigError(key_of(listener, key), f"must be at least {minimum}")
    return value


def mechanisms_of(raw: str | None, key: str = "sasl.enabled.mechanisms") -> tuple[str, ...]:
    """`sasl.enabled.mechanisms`: the served ones only; anything else is refused, naming the key."""
    names = tuple(m.strip() for m in (raw or "GSSAPI").split(",") if m.strip())
    unserved = [m for m in names if m not in SERVED_MECHANISMS]
    if unserved or not names:
        raise SaslConfigError(key, f"{', '.join(unserved) or 'nothing'} not served; enable any of "
                                   f"{', '.join(SERVED_MECHANISMS)}")
    return names


def jaas_entry(setting: Setting, listener: str, mechanism: str) -> LoginModule | None:
    """The JAAS entry for `mechanism` on `listener`: the mechanism-prefixed key first, as Kafka's
    JaasContext.loadServerContext, then the listener's and the broker's `sasl.jaas.config`."""
    for key in (f"{mechanism.lower()}.sasl.jaas.config", "sasl.jaas.config"):
        raw = setting(listener, key)
        if raw:
            try:
                return parse_jaas_config(raw)
            except JaasError as e:
                raise SaslConfigError(_prefixed(listener, key), str(e)) from None
    return None


class SaslListeners:
    def __init__(self, listeners: dict[str, str], setting: Setting, credentials: CredentialCache,
                 failures: Counter | None = None, clock: Callable[[], float] = time.monotonic,
                 broker_id: int = -1, key_of: KeyOf = _prefixed) -> None:
        """`listeners`: listener name → security protocol. Raises SaslConfigError for a bad setting,
        naming the key that supplied it (`key_of`: BrokerConfig.listener_setting_key)."""
        self.broker_id = broker_id
        self.credentials = credentials
        self.failures = failures
        self.clock = clock
        self.settings: dict[str, SaslListener] = {}
        self._plain_users: dict[str, dict[str, str]] = {}
        self._sessions: weakref.WeakKeyDictionary[Any, SaslSession] = weakref.WeakKeyDictionary()
        for name, protocol in listeners.items():
            if protocol not in SASL_PROTOCOLS:
                continue
            mechanisms = mechanisms_of(setting(name, "sasl.enabled.mechanisms"),
                                       key_of(name, "sasl.enabled.mechanisms"))
            self.settings[name] = SaslListener(
                name, mechanisms,
                reauth_ms=_int(setting, key_of, name, "connections.max.reauth.ms", 0),
                failure_delay_ms=_int(setting, key_of, name, "connection.failed.authentication.delay.ms", 100),
                max_receive_size=_int(setting, key_of, name, "sasl.server.max.receive.size", MAX_RECEIVE_SIZE, 1))
            if "PLAIN" in mechanisms:
                entry = jaas_entry(setting, name, "PLAIN")
                if entry is None:
                    raise SaslConfigError(f"listener.name.{name.lower()}.plain.sasl.jaas.config",
                                          "PLAIN is enabled but no JAAS config names its users")
                self._plain_users[name] = entry.users

    def session(self, conn: Any) -> SaslSession | None:
        """The connection's SASL session; None on a listener that is not SASL.

        Asked on every request: a connection of a listener that is not SASL costs one dict lookup."""
        listener = self.settings.get(getattr(conn, "listener_name", ""))
        if listener is None or getattr(conn, "security_protocol", "") not in SASL_PROTOCOLS:
            return None
        session = self._sessions.get(conn)
        if session is None:
            name = listener.name
            session = SaslSession(listener, lambda m: self._mechanism(name, m), self.clock)
            self._sessions[conn] = session
        return session

    def _mechanism(self, listener: str, mechanism: str) -> Mechanism:
        if mechanism == "PLAIN":
            return PlainServer(self._plain_users.get(listener, {}))
        return ScramServer(mechanism, self.credentials)

    def failed(self, conn: Any, session: SaslSession, reason: str) -> float:
        """Count and log an authentication failure; the delay (seconds) before its answer and the close.

        The log line names the listener, peer, mechanism and user, and the reason (Kafka's
        message or the request refused), never a token, password or key."""
        listener = session.listener.name
        if self.failures is not None:
            self.failures.inc(listener=listener, mechanism=session.mechanism or "none")
        log.warning("sasl.authentication_failed", broker_id=self.broker_id, listener=listener,
                    peer=getattr(conn, "peer", ""), mechanism=session.mechanism or None,
                    user=session.username or None, reason=reason, detail=session.failure_detail or None,
                    reauthentication=session.reauthenticating)
        return session.listener.failure_delay_ms / 1000

    def succeeded(self, conn: Any, session: SaslSession) -> None:
        log.info("sasl.authenticated", broker_id=self.broker_id, listener=session.listener.name,
                 peer=getattr(conn, "peer", ""), mechanism=session.mechanism, principal=session.principal,
                 session_lifetime_ms=session.lifetime_ms, reauthentication=session.completions > 1)


def inter_broker_sasl(setting: Setting, listener: str) -> tuple[str, str, str]:
    """This broker's own SASL login on the inter-broker listener: `sasl.mechanism.inter.broker.protocol`
    (Kafka's default GSSAPI is not served) and the `username`/`password` of that mechanism's JAAS
    entry on the listener (as Kafka's brokers log in with their login module's credentials)."""
    key = "sasl.mechanism.inter.broker.protocol"
    mechanism = (setting(listener, key) or "GSSAPI").strip()
    if mechanism not in SERVED_MECHANISMS:
        raise SaslConfigError(key, f"{mechanism} not served; use one of {', '.join(SERVED_MECHANISMS)}")
    entry = jaas_entry(setting, listener, mechanism)
    credentials = entry.client_credentials if entry is not None else None
    if credentials is None:
        raise SaslConfigError(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config",
                              "the inter-broker listener's JAAS config needs username and password")
    return mechanism, credentials[0], credentials[1]
