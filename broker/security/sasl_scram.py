"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512, server side (RFC 5802/7677), with `scramp`, as Kafka 2.8's ScramSaslServer.

Two client messages: client-first (the user's salt and iteration count are looked up in the
credential cache) and client-final (its proof checked against the stored key). The cache
holds what `/config/users/<user>` holds (broker.zk.scram_credentials), kept live by the
dynamic-config notifications for entity type `users`; a credential deleted there stops new
authentications at once, sessions already authenticated are not touched (as Kafka).

The client-first message is read, and the server-first made, by scramp's server. The
client-final is checked here (RFC 5802 section 3: ClientKey = ClientProof XOR HMAC(StoredKey,
AuthMessage), H(ClientKey) = StoredKey; ServerSignature = HMAC(ServerKey, AuthMessage)), because
librdkafka 2.0.2 (kcat, confluent-kafka) echoes its client nonce twice in client-final
(`r=<cnonce><cnonce><snonce>`); Kafka 2.8 does not look at that nonce at all, scramp refuses
it. Here it must end with the server-first nonce (what later Kafka releases require), and the
proof is computed over the bytes the client sent, as both sides do.

Departures: an authorization id in the GS2 header (`n,a=alice,`) is refused (scramp's server
accepts none; no client used here sends one); SCRAM extensions and delegation tokens are not
served. A failure raises SaslFailure without a message, which the session turns into Kafka's
"Authentication failed during authentication due to invalid credentials with SASL mechanism
SCRAM-SHA-512" (Kafka never tells the client whether the user exists). Pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

import scramp
import structlog

from broker.security.sasl_session import SaslFailure
from broker.zk.config_entities import desanitize
from broker.zk.scram_credentials import HASHES, MIN_ITERATIONS, ScramCredential, new_salt

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
        if "/" in znode_name:  # `<user>/clients/<id>`: a KIP-55 quota entity, no credentials
            return
        self.set_user(desanitize(znode_name), config)


def _sasl_name(name: str) -> str:
    """RFC 5802's saslname: `=2C` is `,` and `=3D` is `=` (Kafka's ScramFormatter.username)."""
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    def __init__(self, mechanism: str, credentials: CredentialCache) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        # The server nonce as Kafka makes it (ScramFormatter.secureRandomString: 130 random bits in
        # base 36), not scramp's 64 hex digits: librdkafka's client-final echoes a longer combined
        # nonce wrongly ("Server nonce doesn't match").
        self._server = scramp.ScramMechanism(mechanism).make_server(self._lookup, s_nonce=new_salt().decode())
        self._step = 0
        self._credential: ScramCredential | None = None
        self.complete = False
        self.username = ""

    def _lookup(self, sasl_name: str) -> tuple[bytes, bytes, bytes, int] | None:
        self.username = _sasl_name(sasl_name)
        cred = self._credentials.get(self.username, self.mechanism)
        if cred is None or cred.iterations < MIN_ITERATIONS:
            return None
        self._credential = cred
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def _client_final(self, message: str) -> bytes:
        """Checks client-final (channel binding, nonce, proof); the server-final `v=<ServerSignature>`."""
        cred, server = self._credential, self._server
        if cred is None:
            raise scramp.ScramException("no credential")
        attrs = message.split(",")
        if len(attrs) < 3 or attrs[0][:2] != "c=" or attrs[1][:2] != "r=" or attrs[-1][:2] != "p=":
            raise scramp.ScramException("malformed client-final message")
        without_proof = message[: message.rindex(",p=")]
        try:
            cbind = base64.b64decode(attrs[0][2:], validate=True)
            proof = base64.b64decode(attrs[-1][2:], validate=True)
        except (binascii.Error, ValueError):
            raise scramp.ScramException("bad base64 in client-final message") from None
        if cbind != str(server.gs2_header).encode():
            raise scramp.ScramException("The channel bindings don't match.")
        if not attrs[1][2:].endswith(str(server.nonce)):
            raise scramp.ScramException("Server nonce doesn't match.")
        digest = HASHES[self.mechanism]
        auth_message = f"{server.client_first_bare},{server.server_first},{without_proof}".encode()
        signature = hmac.digest(cred.stored_key, auth_message, digest)
        if len(proof) != len(signature):
            raise scramp.ScramException("The client keys don't match.")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(digest, client_key).digest(), cred.stored_key):
            raise scramp.ScramException("The client keys don't match.")
        return b"v=" + base64.b64encode(hmac.digest(cred.server_key, auth_message, digest))

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
                final = self._client_final(message)
                self.complete = True
                return final
        except scramp.ScramException as e:
            # scramp's words name the step that failed ("The client keys don't match."), no secret.
            raise SaslFailure(None, str(e)) from None
        raise SaslFailure("Unexpected challenge in Sasl server state COMPLETE")
