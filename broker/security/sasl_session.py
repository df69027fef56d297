"""One connection's SASL authentication on a SASL_PLAINTEXT/SASL_SSL listener: Kafka 2.8's
SaslServerAuthenticator states and KafkaChannel's KIP-368 rules, as a pure state machine on an
injected clock. The listener's frame reader asks `admit_frame` with each frame's size prefix
before reading its body, the dispatcher asks `gate` before each request, the SaslHandshake and
SaslAuthenticate handlers call `handshake` and `authenticate`; the I/O (delays, closing,
metrics, logs) is theirs.

States: HANDSHAKE_OR_VERSIONS (new connection: ApiVersions or SaslHandshake), HANDSHAKE (after
ApiVersions: SaslHandshake only), AUTHENTICATE (SaslAuthenticate only), COMPLETE, FAILED.
What Kafka does with anything else, and so what `gate` answers:
- before authentication, a request other than those: IllegalSaslStateException, an
  authentication failure: no response, the connection closed after
  `connection.failed.authentication.delay.ms` (CLOSE_AFTER_DELAY). Departure: in the
  AUTHENTICATE state Kafka first answers such a request with its own error response
  (ILLEGAL_SASL_STATE); here it gets none, the connection is closed the same way.
- a second ApiVersions before the handshake: IllegalStateException, closed at once (CLOSE).
- before authentication (and during re-authentication), a size prefix above
  `sasl.server.max.receive.size` (512 KiB), or a negative one: CLOSE_AFTER_DELAY, decided by `admit_frame` before the
  body is read or a buffer allocated for it (Kafka's SaslServerAuthenticator reads with a
  NetworkReceive bounded by that size: InvalidReceiveException, rethrown as
  SaslAuthenticationException). As there, the bound is on the prefix's value (the bytes after it).
- after authentication, a connection whose session has expired (KIP-368: `connections.max.reauth.ms`
  told to a SaslAuthenticate v1+ client as session_lifetime_ms) is closed at its next request
  unless that is a SaslHandshake starting re-authentication (same mechanism, same principal,
  at most one start per second); a SaslHandshake that cannot start one, and a SaslAuthenticate
  after authentication, get ILLEGAL_SASL_STATE and the connection stays (KafkaApis' answers).
SaslHandshake v0 (tokens then sent bare, without Kafka's header) is refused (see
broker/apis/sasl_handshake.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Protocol

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

# Kafka 2.8's BrokerSecurityConfigs.DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE.
MAX_RECEIVE_SIZE = 524288
# KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS
MIN_REAUTH_INTERVAL_S = 1.0
SERVED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslFailure(Exception):
    """A mechanism refused the client: `message` goes to the client (None: Kafka's generic text)."""

    def __init__(self, message: str | None, detail: str = "") -> None:
        super().__init__(message or "authentication failed")
        self.message = message
        self.detail = detail  # for the broker's log only (the mechanism's own words, never a secret)


class Mechanism(Protocol):
    mechanism: str
    complete: bool
    username: str

    def evaluate(self, token: bytes) -> bytes: ...


class State(Enum):
    HANDSHAKE_OR_VERSIONS = auto()
    HANDSHAKE = auto()
    AUTHENTICATE = auto()
    REAUTH_BAD_MECHANISM = auto()
    COMPLETE = auto()
    FAILED = auto()


class Verdict(Enum):
    PASS = auto()  # dispatch the request
    CLOSE = auto()  # close the connection now, no response
    CLOSE_AFTER_DELAY = auto()  # an authentication failure: no response, close after the delay


@dataclass(frozen=True)
class SaslListener:
    """One SASL listener's settings (Kafka's keys, `listener.name.<l>.` prefix over the plain key)."""

    name: str
    mechanisms: tuple[str, ...]
    reauth_ms: int = 0  # connections.max.reauth.ms: 0 = sessions never expire
    failure_delay_ms: int = 100  # connection.failed.authentication.delay.ms
    max_receive_size: int = MAX_RECEIVE_SIZE


@dataclass
class HandshakeResult:
    error: ErrorCode
    mechanisms: list[str]
    failed: bool = False  # an authentication failure: answer after the delay, then close


@dataclass
class AuthResult:
    error: ErrorCode
    message: str | None = None
    token: bytes = b""
    session_lifetime_ms: int = 0
    failed: bool = False
    principal: str | None = None  # set when authentication (or re-authentication) completed


@dataclass
class SaslSession:
    listener: SaslListener
    new_mechanism: Callable[[str], Mechanism]
    clock: Callable[[], float]  # seconds, monotonic
    state: State = State.HANDSHAKE_OR_VERSIONS
    mechanism: str = ""
    principal: str | None = None
    expires_at: float | None = None
    reauthenticating: bool = False
    supports_reauth: bool = False
    _server: Mechanism | None = field(default=None, repr=False)
    _last_reauth_start: float | None = None
    _bad_mechanism: str = ""
    _last_username: str = ""

    lifetime_ms: int = 0
    failure_detail: str = ""
    completions: int = 0  # authentications that completed on this connection (re-authentications: > 1)

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def username(self) -> str:
        """Who the client says it is, once its mechanism has read that (for log lines)."""
        if self._server is not None and self._server.username:
            return self._server.username
        return self._last_username


    def admit_frame(self, size: int) -> Verdict:
        """A frame's size prefix, before its body is read: while the client is not authenticated
        (or re-authenticating), one above `sasl.server.max.receive.size` is an authentication
        failure, refused before anything is allocated for it."""
        s = self.state
        if s is State.FAILED:
            return Verdict.CLOSE
        if (s is State.COMPLETE and not self.reauthenticating) or 0 <= size <= self.listener.max_receive_size:
            return Verdict.PASS  # (a negative size is Kafka's InvalidReceiveException too: a failure here)
        self.state = State.FAILED
        return Verdict.CLOSE_AFTER_DELAY

    def gate(self, api_key: int, served: bool = True) -> Verdict:
        """`served`: the request's version is one this broker serves (an ApiVersions at a version it
        does not serve is answered with the error and leaves the state, as Kafka's authenticator).
        The frame's size was checked before it was read (`admit_frame`)."""
        s = self.state
        if s is State.FAILED:
            return Verdict.CLOSE
        if s is State.COMPLETE and not self.reauthenticating:
            if self.expires_at is not None and self.clock() > self.expires_at and api_key != ApiKey.SASL_HANDSHAKE:
                return Verdict.CLOSE  # Kafka: "Disconnecting expired channel"
            return Verdict.PASS
        if s is State.HANDSHAKE_OR_VERSIONS:
            if api_key == ApiKey.API_VERSIONS:
                if served:
                    self.state = State.HANDSHAKE
                return Verdict.PASS
            if api_key == ApiKey.SASL_HANDSHAKE:
                return Verdict.PASS
        elif s is State.HANDSHAKE:
            if api_key == ApiKey.SASL_HANDSHAKE:
                return Verdict.PASS
            if api_key == ApiKey.API_VERSIONS:
                self.state = State.FAILED
                return Verdict.CLOSE
        elif s in (State.AUTHENTICATE, State.REAUTH_BAD_MECHANISM) and api_key == ApiKey.SASL_AUTHENTICATE:
            return Verdict.PASS
        self.state = State.FAILED
        return Verdict.CLOSE_AFTER_DELAY

    def handshake(self, mechanism: str, version: int = 1) -> HandshakeResult:
        enabled = list(self.listener.mechanisms)
        if version < 1:  # the bare-token exchange is not served (broker/apis/sasl_handshake.py)
            self.state = State.FAILED
            return HandshakeResult(ErrorCode.ILLEGAL_SASL_STATE, enabled, failed=True)
        if self.state is State.COMPLETE:
            now = self.clock()
            if (self.expires_at is None or (self._last_reauth_start is not None
                                            and now - self._last_reauth_start < MIN_REAUTH_INTERVAL_S)):
                return HandshakeResult(ErrorCode.ILLEGAL_SASL_STATE, [])
            self._last_reauth_start = now
            self.reauthenticating = True
        elif self.state not in (State.HANDSHAKE_OR_VERSIONS, State.HANDSHAKE):
            self.state = State.FAILED
            return HandshakeResult(ErrorCode.ILLEGAL_SASL_STATE, [], failed=True)
        if mechanism not in enabled:
            self.state = State.FAILED
            return HandshakeResult(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled, failed=True)
        if self.reauthenticating and mechanism != self.mechanism:
            self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                   f"re-authentication of mechanism '{self.mechanism}'")
            self.state = State.REAUTH_BAD_MECHANISM
            return HandshakeResult(ErrorCode.NONE, enabled)
        self.mechanism = mechanism
        self._server = self.new_mechanism(mechanism)
        self.state = State.AUTHENTICATE
        return HandshakeResult(ErrorCode.NONE, enabled)

    def _what(self) -> str:
        return "re-authentication" if self.reauthenticating else "authentication"

    def _fail(self, message: str) -> AuthResult:
        self.state = State.FAILED
        return AuthResult(ErrorCode.SASL_AUTHENTICATION_FAILED, message, failed=True)

    def authenticate(self, token: bytes, version: int) -> AuthResult:
        if self.state is State.COMPLETE:
            return AuthResult(ErrorCode.ILLEGAL_SASL_STATE,
                              "SaslAuthenticate request received after successful authentication")
        if self.state is State.REAUTH_BAD_MECHANISM:
            return self._fail(self._bad_mechanism)
        server = self._server
        if self.state is not State.AUTHENTICATE or server is None:
            self.state = State.FAILED
            return AuthResult(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request", failed=True)
        self.supports_reauth = self.supports_reauth or version > 0
        try:
            reply = server.evaluate(token)
        except SaslFailure as e:
            self._last_username = server.username
            self.failure_detail = e.detail
            return self._fail(e.message or (f"Authentication failed during {self._what()} due to invalid "
                                            f"credentials with SASL mechanism {self.mechanism}"))
        if not server.complete:
            return AuthResult(ErrorCode.NONE, None, reply)
        principal = f"User:{server.username}"
        if self.reauthenticating and principal != self.principal:
            return self._fail(f"Cannot change principals during re-authentication from "
                              f"{self.principal}: {principal}")
        lifetime = self.listener.reauth_ms if self.listener.reauth_ms > 0 and self.supports_reauth else 0
        self.expires_at = self.clock() + lifetime / 1000 if lifetime else None
        self.lifetime_ms = lifetime
        self.completions += 1
        self._last_username = server.username
        self.principal = principal
        self.state = State.COMPLETE
        self.reauthenticating = False
        self._server = None
        return AuthResult(ErrorCode.NONE, None, reply, lifetime, principal=principal)
