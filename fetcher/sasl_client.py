"""The client side of SASL PLAIN and SCRAM-SHA-256/512: SaslHandshake v1, then SaslAuthenticate.

What Kafka's SaslClientAuthenticator does after TLS (if any) and before any other request:
SaslHandshake v1 naming the mechanism, then one SaslAuthenticate per client token (PLAIN: one,
`NUL user NUL password`; SCRAM: client-first and client-final, with `scramp` checking the
server's signature). A refusal raises SaslAuthenticationError with the broker's error code and
message. The mechanisms are sans-IO (`PlainClient`, `ScramClient`: token in, token out);
`authenticate` drives them over any `send(api_key, version, body) -> response` coroutine, so
this module never imports the connection.

KIP-368 on the client side: when SaslAuthenticate v1+ answers with session_lifetime_ms > 0 the
broker will close the connection at its first request after the session expires (unless that
request is a SaslHandshake starting re-authentication). `ReauthSchedule` says when to run the
exchange again on the same connection: as Kafka's SaslClientAuthenticator, at a random point
between 85% and 95% of the lifetime after the answer arrived (the 85% leaves room for latency and
clock drift, the 10% jitter keeps many connections from re-authenticating at once). Like Kafka's
Selector, the connection checks it before sending a request, so an idle connection is not woken.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import scramp

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
Send = Callable[[int, int, dict[str, Any]], Awaitable[dict[str, Any]]]
# SaslClientAuthenticator: pctWindowFactorToTakeNetworkLatencyAndClockDriftIntoAccount and
# pctWindowJitterToAvoidReauthenticationStormAcrossManyChannelsSimultaneously.
REAUTH_AT = 0.85
REAUTH_JITTER = 0.10


class SaslAuthenticationError(ConnectionError):
    def __init__(self, error_code: int, message: str | None) -> None:
        super().__init__(f"{ErrorCode.name_of(error_code)}: {message or ''}".rstrip(": "))
        self.error_code = error_code
        self.message = message


class MechanismClient(Protocol):
    def next_token(self, challenge: bytes | None) -> bytes | None:
        """The next token to send (None: done), given the server's last token (None at first)."""


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self._token = b"\x00" + username.encode() + b"\x00" + password.encode()
        self._sent = False

    def next_token(self, challenge: bytes | None) -> bytes | None:
        if self._sent:
            return None
        self._sent = True
        return self._token


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._client = scramp.ScramClient([mechanism], username, password)
        self._step = 0

    def next_token(self, challenge: bytes | None) -> bytes | None:
        self._step += 1
        if self._step == 1:
            return str(self._client.get_client_first()).encode()
        assert challenge is not None
        if self._step == 2:
            self._client.set_server_first(challenge.decode())
            return str(self._client.get_client_final()).encode()
        try:
            self._client.set_server_final(challenge.decode())  # the server proves it knows the key
        except scramp.ScramException as e:
            raise SaslAuthenticationError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"server signature: {e}") from None
        return None


def mechanism_client(mechanism: str, username: str, password: str) -> MechanismClient:
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return ScramClient(mechanism, username, password)
    raise ValueError(f"sasl.mechanism {mechanism} is not supported; use one of {', '.join(MECHANISMS)}")


async def authenticate(send: Send, mechanism: str, username: str, password: str) -> int:
    """Run the exchange; the session lifetime the broker granted (ms, 0: none). Raises SaslAuthenticationError."""
    client = mechanism_client(mechanism, username, password)
    hs = await send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if hs["error_code"]:
        raise SaslAuthenticationError(hs["error_code"], f"{mechanism} not enabled; the broker offers "
                                                        f"{', '.join(hs['mechanisms'])}")
    challenge: bytes | None = None
    lifetime = 0
    while True:
        token = client.next_token(challenge)
        if token is None:
            return lifetime
        resp = await send(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        if resp["error_code"]:
            raise SaslAuthenticationError(resp["error_code"], resp["error_message"])
        challenge = bytes(resp["auth_bytes"])
        lifetime = int(resp.get("session_lifetime_ms") or 0)


@dataclass
class ReauthSchedule:
    """When one connection re-authenticates (KIP-368, client side): pure, on an injected clock.

    `authenticated(lifetime_ms)` after each (re-)authentication, with the session lifetime the
    broker granted (0: the session never expires, no re-authentication); `due()` before each
    request says whether to run the exchange first."""

    clock: Callable[[], float]  # seconds, monotonic
    jitter: Callable[[], float] = field(default=random.random)  # uniform in [0, 1)
    due_at: float | None = None

    def authenticated(self, lifetime_ms: int) -> None:
        if lifetime_ms <= 0:
            self.due_at = None
            return
        self.due_at = self.clock() + lifetime_ms / 1000 * (REAUTH_AT + self.jitter() * REAUTH_JITTER)

    def due(self) -> bool:
        return self.due_at is not None and self.clock() >= self.due_at
