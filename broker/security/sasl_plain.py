"""SASL/PLAIN, server side (RFC 4616), as Kafka 2.8's PlainSaslServer with PlainServerCallbackHandler.

One message, `[authzid] NUL authcid NUL passwd`, checked against the listener's JAAS users
(`user_<name>="<password>"`), in constant time. The failure messages are Kafka's, and go to
the client as SaslAuthenticate's error message; none names the password. Pure.
"""

from __future__ import annotations

import hmac

from broker.security.sasl_session import SaslFailure


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Authentication failed: Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)))
        authzid, username, password = parts
        if not username:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        self.username = username
        expected = self._users.get(username)
        # Compared even for an unknown user, so the time taken does not say which users exist.
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\x00" + password).encode())
        if expected is None or not ok:
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different from username")
        self.complete = True
        return b""
