"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512, server side (RFC 5802/7677), with `scramp`, as Kafka 2.8's ScramSaslServer.

Two client messages: client-first (the user's salt and iteration count are looked up in the
credential cache) and client-final (its proof checked against the stored key). The cache
holds what `/config/users/<user>` holds (broker.zk.scram_credentials), kept live by the
dynamic-config notifications for entity type `users`; a credential deleted there stops new
authentications at once, sessions already authenticated are not touched (as Kafka).

Departures: an authorization id in the GS2 header (`n,a=alice,`) is refused (scramp's server
accepts none; no client used here sends one); SCRAM extensions and delegation tokens are not
served. A failure raises SaslFailure without a message, which the session turns into Kafka's
"Authentication failed during authentication due to invalid credentials with SASL mechanism
SCRAM-SHA-512" (Kafka never tells the client whether the user exists). Pure.
"""

from __future__ import annotations

import scramp
import structlog

from broker.security.sasl_session import SaslFailure
from broker.zk.config_entities import desanitize
from broker.zk.scram_credentials import HASHES, MIN_ITERATIONS, ScramCredential

log = structlog.get_logger()


class CredentialCache:
    """Every user's SCRAM credentials, by mechanism: Kafka's CredentialCache, fed from ZooKeeper."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._users.items()}

    def set_user(self, user: str, config: dict[str, str]) -> None:
        creds: dict[str, ScramCredential] = {}
        for mechanism in HASHES:
            value = config.get(mechanism)
            if value is None:
                continue
            try:
                creds[mechanism] = ScramCredential.from_config(value)
            except ValueError as e:
                log.warning("sasl.bad_credential", user=user, mechanism=mechanism, error=str(e))
        if creds:
            self._users[user] = creds
        else:
            self._users.pop(user, None)
        log.info("sasl.credentials_updated", user=user, mechanisms=sorted(creds))

    async def on_user_config(self, znode_name: str, config: dict[str, str]) -> None:
        """The dynamic-config handler for `/config/users/<sanitized user>`."""
        self.set_user(desanitize(znode_name), config)


def _sasl_name(name: str) -> str:
    """RFC 5802's saslname: `=2C` is `,` and `=3D` is `=` (Kafka's ScramFormatter.username)."""
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    def __init__(self, mechanism: str, credentials: CredentialCache) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._server = scramp.ScramMechanism(mechanism).make_server(self._lookup)
        self._step = 0
        self.complete = False
        self.username = ""

    def _lookup(self, sasl_name: str) -> tuple[bytes, bytes, bytes, int] | None:
        self.username = _sasl_name(sasl_name)
        cred = self._credentials.get(self.username, self.mechanism)
        if cred is None or cred.iterations < MIN_ITERATIONS:
            return None
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure(None) from None
        try:
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(message)
                return str(self._server.get_server_first()).encode()
            if self._step == 1:
                self._step = 2
                self._server.set_client_final(message)
                final = str(self._server.get_server_final()).encode()
                self.complete = True
                return final
        except scramp.ScramException:
            raise SaslFailure(None) from None
        raise SaslFailure("Unexpected challenge in Sasl server state COMPLETE")
