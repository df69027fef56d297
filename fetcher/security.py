"""How a client connects: security protocol, TLS key material and SASL credentials.

`ClientSecurity` is what `KafkaConnection.open` takes; the tools build it from a Java client
properties file (`--command-config`), the broker from its inter-broker listener's settings.
Key material is PEM (Kafka's KIP-651 keys) or PKCS12 (`ssl.keystore.type`/`ssl.truststore.type`
PKCS12 with `ssl.keystore.password`/`ssl.truststore.password`, read with `cryptography`); JKS is
refused, naming the key. Python's `ssl` loads a certificate chain and key only from a file, so
inline PEM goes through a private temporary file (0600) that is removed as soon as it is loaded;
a PKCS12 key goes the same way, encrypted there under a random one-time password. No PEM text,
key or password is ever logged or put in a repr.

Store types (a departure: Kafka's default type is JKS; here a store whose type is not given is
PEM). PKCS12, as Kafka 2.8's DefaultSslEngineFactory reads it: a key store needs its
ssl.keystore.password; a PKCS12 file has one password, so ssl.key.password, if given, must be the
same (keytool ignores a different -keypass for PKCS12, and Kafka would fail to recover the key);
a trust store's password may be left out only if its certificates are not encrypted.

Every ssl.* value is trimmed (`trimmed`, Kafka's ConfigDef on STRING and PASSWORD keys) by the
two readers, the clients' and the broker's, before anything is checked or a store is opened.
"""

from __future__ import annotations

import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fetcher.jaas import JaasError, parse_jaas_config

if TYPE_CHECKING:  # cryptography is imported when a PKCS12 store is read, not with every client
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

STORE_TYPES = ("PEM", "PKCS12")

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


class SecurityConfigError(ValueError):
    """A security setting that cannot be used; names the key, never the value of a secret."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"invalid configuration {key}: {why}")
        self.key = key
        self.why = why


def normalize_pem(text: str) -> str:
    """PEM blocks with their base64 re-wrapped: a Java properties value joined from continuation
    lines (`-----BEGIN CERTIFICATE----- MIIB… -----END CERTIFICATE-----`) is valid to Kafka but not
    to OpenSSL. Text without a PEM block is returned as is (OpenSSL then refuses it)."""
    blocks = []
    for m in _PEM_BLOCK.finditer(text):
        kind, body = m.group(1), m.group(2)
        # Encrypted PEM keys carry `Proc-Type:`/`DEK-Info:` headers before their base64.
        headers, sep, b64 = body.rpartition("\n\n") if "Proc-Type:" in body else ("", "", body)
        b64 = "".join(b64.split())
        lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
        head = headers.strip() + "\n\n" if sep else ""
        blocks.append(f"-----BEGIN {kind}-----\n{head}" + "\n".join(lines) + f"\n-----END {kind}-----\n")
    return "".join(blocks) if blocks else text


def trimmed(value: str | None) -> str | None:
    """A security setting's value as Kafka's ConfigDef parses it: every ssl.* key is a STRING or a
    PASSWORD, and both lose leading and trailing whitespace. Both readers (ClientSecurity.from_properties
    and broker.security.ssl_settings) take each ssl.* value through here, so a store password is the
    same whether it came from a properties file, --override, a KAFKA_* variable or a Spark kafka.* option."""
    return None if value is None else value.strip()


def store_type(key: str, raw: str | None) -> str:
    """`ssl.keystore.type` / `ssl.truststore.type`: PEM (also when not given) or PKCS12."""
    kind = (raw or "").strip().upper() or "PEM"
    if kind == "JKS":
        raise SecurityConfigError(key, "JKS stores are not supported; convert the store to PKCS12 (keytool "
                                       "-importkeystore -srcstoretype JKS -deststoretype PKCS12) or PEM")
    if kind not in STORE_TYPES:
        raise SecurityConfigError(key, f"{raw!r} is not supported; PEM or PKCS12")
    return kind


def check_stores(get: Callable[[str], str | None]) -> tuple[str, str]:
    """The key and trust store types, checked with their passwords and locations (no file I/O):
    `get(bare key)` is the value given, trimmed(), or None. SecurityConfigError names the bare key."""
    keystore = store_type("ssl.keystore.type", get("ssl.keystore.type"))
    truststore = store_type("ssl.truststore.type", get("ssl.truststore.type"))
    if keystore == "PEM":
        # Kafka's DefaultSslEngineFactory: a PEM store has no store password, only ssl.key.password.
        if get("ssl.keystore.password"):
            raise SecurityConfigError("ssl.keystore.password", "a PEM key store has no password; give "
                                                               "ssl.key.password only")
    else:
        for inline in ("ssl.keystore.certificate.chain", "ssl.keystore.key"):
            if get(inline):
                raise SecurityConfigError(inline, "inline key material is PEM (ssl.keystore.type=PEM)")
        if get("ssl.keystore.location") and not get("ssl.keystore.password"):
            raise SecurityConfigError("ssl.keystore.password", "a PKCS12 key store needs its password")
        key_password = get("ssl.key.password")
        if key_password and key_password != get("ssl.keystore.password"):
            raise SecurityConfigError("ssl.key.password", "a PKCS12 key store has one password: leave "
                                                          "ssl.key.password out or make it ssl.keystore.password")
    if truststore == "PEM":
        if get("ssl.truststore.password"):
            raise SecurityConfigError("ssl.truststore.password", "a PEM trust store has no password")
    elif get("ssl.truststore.certificates"):
        raise SecurityConfigError("ssl.truststore.certificates", "inline certificates are PEM "
                                                                 "(ssl.truststore.type=PEM)")
    return keystore, truststore


def _read_store(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise SecurityConfigError(key, "file not found") from None
    except OSError as e:
        raise SecurityConfigError(key, f"cannot read it ({e.strerror})") from None


def _pkcs12(data: bytes, password: str | None) -> tuple[PrivateKeyTypes | None, list[x509.Certificate]] | None:
    """A PKCS12 file's private key (or None) and certificates, the key's own first; None when the
    file cannot be read with that password (or is no PKCS12 file: the library does not tell)."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        return None
    return key, ([cert] if cert is not None else []) + list(extra)


def _load_pkcs12_key(ctx: ssl.SSLContext, location: str, password: str | None,
                     name: Callable[[str], str]) -> None:
    from cryptography.hazmat.primitives import serialization

    store = _pkcs12(_read_store(location, name("ssl.keystore.location")), password)
    if store is None:
        raise SecurityConfigError(name("ssl.keystore.location"), "not a PKCS12 key store, or "
                                                                 f"{name('ssl.keystore.password')} is wrong")
    key, certs = store
    if key is None or not certs:
        raise SecurityConfigError(name("ssl.keystore.location"), "the PKCS12 key store holds no private key "
                                                                 "with its certificate")
    # The key goes to the temporary file encrypted, under a password that lives only here.
    one_time = secrets.token_urlsafe(32)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(one_time.encode()))
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    fd, path = tempfile.mkstemp(prefix="minibroker-key-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
            f.write(chain)
        try:
            ctx.load_cert_chain(path, password=one_time)
        except ssl.SSLError as e:
            raise SecurityConfigError(name("ssl.keystore.location"), "the PKCS12 key store's key does not match "
                                      f"its certificate ({e.reason or type(e).__name__})") from None
    finally:
        os.unlink(path)


def load_key_material(ctx: ssl.SSLContext, *, keystore_location: str | None = None,
                      keystore_chain: str | None = None, keystore_key: str | None = None,
                      key_password: str | None = None, key_names: Mapping[str, str] | None = None,
                      keystore_type: str = "PEM", keystore_password: str | None = None) -> None:
    """Loads a certificate chain and its private key into `ctx`: one PEM file holding both
    (`ssl.keystore.location`), inline PEM (`ssl.keystore.certificate.chain` + `ssl.keystore.key`),
    or a PKCS12 file (`keystore_type` PKCS12, opened with `keystore_password`).
    Errors raise SecurityConfigError naming the key (`key_names` maps a bare key to the one given,
    e.g. a `listener.name.` prefixed one)."""
    def name(key: str) -> str:
        return (key_names or {}).get(key, key)

    if keystore_type == "PKCS12":
        if keystore_location:
            _load_pkcs12_key(ctx, keystore_location, keystore_password, name)
        return
    if keystore_location:
        try:
            ctx.load_cert_chain(keystore_location, password=key_password)
        except FileNotFoundError:
            raise SecurityConfigError(name("ssl.keystore.location"), "file not found") from None
        except ssl.SSLError as e:
            raise SecurityConfigError(name("ssl.keystore.location"),
                                      f"not a PEM file with a certificate chain and its key, or a wrong "
                                      f"ssl.key.password ({e.reason or type(e).__name__})") from None
        except OSError as e:
            raise SecurityConfigError(name("ssl.keystore.location"), f"cannot read it ({e.strerror})") from None
        return
    if keystore_chain is None and keystore_key is None:
        return
    if not keystore_chain or not keystore_key:
        missing = "ssl.keystore.certificate.chain" if not keystore_chain else "ssl.keystore.key"
        raise SecurityConfigError(name(missing), "an inline PEM key needs both ssl.keystore.certificate.chain "
                                                 "and ssl.keystore.key")
    fd, path = tempfile.mkstemp(prefix="minibroker-key-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(normalize_pem(keystore_key))
            f.write(normalize_pem(keystore_chain))
        try:
            ctx.load_cert_chain(path, password=key_password)
        except ssl.SSLError as e:
            raise SecurityConfigError(name("ssl.keystore.key"),
                                      f"not a PEM private key matching ssl.keystore.certificate.chain, or a "
                                      f"wrong ssl.key.password ({e.reason or type(e).__name__})") from None
    finally:
        os.unlink(path)


def load_trust(ctx: ssl.SSLContext, *, truststore_location: str | None = None,
               truststore_certificates: str | None = None, key_names: Mapping[str, str] | None = None,
               truststore_type: str = "PEM", truststore_password: str | None = None) -> bool:
    """Loads the trusted CA certificates (a PEM file, inline PEM, or a PKCS12 file: its certificate
    entries, keytool's trusted ones included); False when none is given."""
    names = key_names or {}
    if truststore_location and truststore_type == "PKCS12":
        from cryptography.hazmat.primitives import serialization

        key = names.get("ssl.truststore.location", "ssl.truststore.location")
        store = _pkcs12(_read_store(truststore_location, key), truststore_password)
        if store is None:
            password_key = names.get("ssl.truststore.password", "ssl.truststore.password")
            raise SecurityConfigError(key, f"not a PKCS12 trust store, or {password_key} is "
                                           f"{'wrong' if truststore_password else 'needed'}")
        certs = store[1]
        if not certs:
            raise SecurityConfigError(key, "the PKCS12 trust store holds no certificate")
        try:
            ctx.load_verify_locations(cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode()
                                                     for c in certs))
        except (ssl.SSLError, ValueError) as e:
            # cryptography read the store, but OpenSSL refuses one of its certificates as a CA.
            raise SecurityConfigError(key, "a certificate of the PKCS12 trust store cannot be trusted "
                                           f"({getattr(e, 'reason', None) or type(e).__name__})") from None
        return True
    if truststore_location:
        key = names.get("ssl.truststore.location", "ssl.truststore.location")
        try:
            ctx.load_verify_locations(cafile=truststore_location)
        except FileNotFoundError:
            raise SecurityConfigError(key, "file not found") from None
        except ssl.SSLError as e:
            raise SecurityConfigError(key, f"not a PEM file of certificates ({e.reason or type(e).__name__})") from None
        except OSError as e:
            raise SecurityConfigError(key, f"cannot read it ({e.strerror})") from None
        return True
    if truststore_certificates:
        key = names.get("ssl.truststore.certificates", "ssl.truststore.certificates")
        try:
            ctx.load_verify_locations(cadata=normalize_pem(truststore_certificates))
        except (ssl.SSLError, ValueError) as e:
            raise SecurityConfigError(key, f"not PEM certificates ({getattr(e, 'reason', None) or type(e).__name__})") from None
        return True
    return False


def tls_versions(key: str, raw: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """`ssl.enabled.protocols` (TLSv1.2 and/or TLSv1.3) as the lowest and highest version allowed."""
    names = [p.strip() for p in raw.split(",") if p.strip()]
    if not names:
        raise SecurityConfigError(key, "no protocol enabled")
    for n in names:
        if n not in TLS_VERSIONS:
            raise SecurityConfigError(key, f"{n!r} is not supported; TLSv1.2 and TLSv1.3 are")
    versions = sorted(TLS_VERSIONS[n] for n in names)
    return versions[0], versions[-1]


def parse_jaas(key: str, raw: str) -> dict[str, str]:
    """The options of a `sasl.jaas.config` line (username, password…), as fetcher.jaas reads it."""
    try:
        return parse_jaas_config(raw).options
    except JaasError as e:
        raise SecurityConfigError(key, str(e)) from None


@dataclass(frozen=True)
class ClientSecurity:
    """A client's side of a listener's security protocol."""

    security_protocol: str = "PLAINTEXT"
    # Trusted CAs: a PEM file, or PEM text (ssl.truststore.certificates); neither: the system's.
    ssl_truststore_location: str | None = None
    ssl_truststore_certificates: str | None = field(default=None, repr=False)
    # The client's own certificate and key: one PEM file with both, or inline chain + key.
    ssl_keystore_location: str | None = None
    ssl_keystore_certificate_chain: str | None = field(default=None, repr=False)
    ssl_keystore_key: str | None = field(default=None, repr=False)
    ssl_key_password: str | None = field(default=None, repr=False)
    # PEM or PKCS12 (check_stores); a PKCS12 store's password.
    ssl_keystore_type: str = "PEM"
    ssl_keystore_password: str | None = field(default=None, repr=False)
    ssl_truststore_type: str = "PEM"
    ssl_truststore_password: str | None = field(default=None, repr=False)
    # Kafka's ssl.endpoint.identification.algorithm: "https" checks the host name, "" does not.
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_enabled_protocols: str = "TLSv1.2,TLSv1.3"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def check_hostname(self) -> bool:
        return self.ssl_endpoint_identification_algorithm.strip().lower() == "https"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (None for PLAINTEXT and SASL_PLAINTEXT): the server's certificate
        is verified against the truststore; its host name too unless the algorithm is empty."""
        if not self.uses_tls:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version, ctx.maximum_version = tls_versions("ssl.enabled.protocols", self.ssl_enabled_protocols)
        ctx.check_hostname = self.check_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not load_trust(ctx, truststore_location=self.ssl_truststore_location,
                          truststore_certificates=self.ssl_truststore_certificates,
                          truststore_type=self.ssl_truststore_type, truststore_password=self.ssl_truststore_password):
            ctx.load_default_certs()
        load_key_material(ctx, keystore_location=self.ssl_keystore_location,
                          keystore_chain=self.ssl_keystore_certificate_chain, keystore_key=self.ssl_keystore_key,
                          key_password=self.ssl_key_password, keystore_type=self.ssl_keystore_type,
                          keystore_password=self.ssl_keystore_password)
        return ctx

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """From Java client properties (a `--command-config` file): PEM or PKCS12 stores."""
        def get(key: str) -> str | None:
            return trimmed(props.get(key))

        proto = (get("security.protocol") or "PLAINTEXT").upper()
        if proto not in SECURITY_PROTOCOLS:
            raise SecurityConfigError("security.protocol", f"unknown security protocol; one of {list(SECURITY_PROTOCOLS)}")
        keystore_type, truststore_type = check_stores(get)
        algorithm = get("ssl.endpoint.identification.algorithm")
        algorithm = "https" if algorithm is None else algorithm
        if algorithm.lower() not in ("", "https"):
            raise SecurityConfigError("ssl.endpoint.identification.algorithm", "expected https or empty")
        protocols = get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3"
        tls_versions("ssl.enabled.protocols", protocols)
        username, password = get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas:
            options = parse_jaas("sasl.jaas.config", jaas)
            username = options.get("username", username)
            password = options.get("password", password)
        if (get("ssl.keystore.certificate.chain") is None) != (get("ssl.keystore.key") is None):
            missing = "ssl.keystore.key" if get("ssl.keystore.key") is None else "ssl.keystore.certificate.chain"
            raise SecurityConfigError(missing, "an inline PEM key needs both ssl.keystore.certificate.chain "
                                               "and ssl.keystore.key")
        return cls(
            security_protocol=proto,
            ssl_truststore_location=get("ssl.truststore.location") or None,
            ssl_truststore_certificates=get("ssl.truststore.certificates") or None,
            ssl_keystore_location=get("ssl.keystore.location") or None,
            ssl_keystore_certificate_chain=get("ssl.keystore.certificate.chain") or None,
            ssl_keystore_key=get("ssl.keystore.key") or None,
            ssl_key_password=get("ssl.key.password") or None,
            ssl_keystore_type=keystore_type,
            ssl_keystore_password=get("ssl.keystore.password") or None,
            ssl_truststore_type=truststore_type,
            ssl_truststore_password=get("ssl.truststore.password") or None,
            ssl_endpoint_identification_algorithm=algorithm,
            ssl_enabled_protocols=protocols,
            sasl_mechanism=(get("sasl.mechanism") or None),
            sasl_username=username,
            sasl_password=password,
        )


PLAINTEXT = ClientSecurity()
