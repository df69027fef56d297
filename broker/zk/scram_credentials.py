"""SCRAM credentials as Kafka 2.8 stores them in `/config/users/<user>`: one key per mechanism.

`SCRAM-SHA-512` → `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>` (Kafka's
ScramCredentialUtils.credentialToString, standard base64), beside any quota keys of the user.
The derivations are RFC 5802's (ScramFormatter): SaltedPassword = Hi(password, salt, i),
StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key").
A new salt is Kafka's too: the ASCII of a random 130-bit number in base 36. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

SCRAM_SHA_256, SCRAM_SHA_512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
# Kafka's ScramMechanism: hash, minimum iterations, and the wire type of KIP-554 (0 is UNKNOWN).
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # KIP-554's upper bound for AlterUserScramCredentials
DEFAULT_ITERATIONS = 4096  # ConfigCommand.DefaultScramIterations
MECHANISM_TYPES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_TYPES.items()}

_PASSWORD_SPEC = re.compile(r"(?:iterations=([0-9]*),)?password=(.*)", re.DOTALL)


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # never the keys, in a log line or a traceback
        return f"ScramCredential(iterations={self.iterations})"

    def to_config(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_config(cls, value: str) -> ScramCredential:
        """Kafka's credentialFromString: exactly the four properties; ValueError otherwise
        (its message never repeats the value)."""
        props: dict[str, str] = {}
        for token in value.split(","):
            key, sep, v = token.partition("=")
            if not sep:
                raise ValueError("credentials not valid: expected salt, stored_key, server_key and iterations")
            props[key] = v
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError("credentials not valid: expected salt, stored_key, server_key and iterations")
        try:
            salt, stored, server = (base64.b64decode(props[k], validate=True)
                                    for k in ("salt", "stored_key", "server_key"))
            iterations = int(props["iterations"])
        except (binascii.Error, ValueError):
            raise ValueError("credentials not valid: bad base64 or iteration count") from None
        return cls(salt, stored, server, iterations)


def new_salt() -> bytes:
    """ScramFormatter.secureRandomBytes: BigInteger(130, SecureRandom).toString(36), as ASCII."""
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out.encode()


def from_salted_password(mechanism: str, salted_password: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The stored form of a SaltedPassword (what AlterUserScramCredentials sends)."""
    h = HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", h)
    stored_key = hashlib.new(h, client_key).digest()
    server_key = hmac.digest(salted_password, b"Server Key", h)
    return ScramCredential(salt, stored_key, server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with HMAC-H (Kafka normalises nothing: UTF-8 bytes)."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def from_password(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                  salt: bytes | None = None) -> ScramCredential:
    """ScramFormatter.generateCredential."""
    salt = new_salt() if salt is None else salt
    return from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def parse_password_spec(mechanism: str, spec: str) -> tuple[int, str]:
    """`[iterations=N,]password=P` as ConfigCommand reads it (the default 4096, at least 4096).

    ValueError naming the mechanism, never the password."""
    m = _PASSWORD_SPEC.fullmatch(spec)
    if m is None:
        raise ValueError(f"Invalid credential property {mechanism}: expected [iterations=N,]password=...")
    iterations = int(m.group(1)) if m.group(1) else DEFAULT_ITERATIONS
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for {mechanism}")
    return iterations, m.group(2)
