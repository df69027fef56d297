"""How a client connects: security protocol, TLS key material and SASL credentials.

`ClientSecurity` is what `KafkaConnection.open` takes; the tools build it from a Java client
properties file (`--command-config`), the broker from its inter-broker listener's settings.
Key material is PEM only (Kafka's KIP-651 keys). Python's `ssl` loads a certificate chain
and key only from a file, so inline PEM goes through a private temporary file (0600) that is
removed as soon as it is loaded; no PEM text, key or password is ever logged or put in a repr.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

from fetcher.jaas import JaasError, parse_jaas_config

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

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


def load_key_material(ctx: ssl.SSLContext, *, keystore_location: str | None = None,
                      keystore_chain: str | None = None, keystore_key: str | None = None,
                      key_password: str | None = None, key_names: Mapping[str, str] | None = None) -> None:
    """Loads a certificate chain and its private key into `ctx`: one PEM file holding both
    (`ssl.keystore.location`) or inline PEM (`ssl.keystore.certificate.chain` + `ssl.keystore.key`).
    Errors raise SecurityConfigError naming the key (`key_names` maps a bare key to the one given,
    e.g. a `listener.name.` prefixed one)."""
    def name(key: str) -> str:
        return (key_names or {}).get(key, key)

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
               truststore_certificates: str | None = None, key_names: Mapping[str, str] | None = None) -> bool:
    """Loads the trusted CA certificates (a PEM file or inline PEM); False when neither is given."""
    names = key_names or {}
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
                          truststore_certificates=self.ssl_truststore_certificates):
            ctx.load_default_certs()
        load_key_material(ctx, keystore_location=self.ssl_keystore_location,
                          keystore_chain=self.ssl_keystore_certificate_chain, keystore_key=self.ssl_keystore_key,
                          key_password=self.ssl_key_password)
        return ctx

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """From Java client properties (a `--command-config` file). Only PEM stores are read."""
        def get(key: str) -> str | None:
            value = props.get(key)
            return value if value is None else value.strip()

        proto = (get("security.protocol") or "PLAINTEXT").upper()
        if proto not in SECURITY_PROTOCOLS:
            raise SecurityConfigError("security.protocol", f"unknown security protocol; one of {list(SECURITY_PROTOCOLS)}")
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            kind = get(key)
            if kind and kind.upper() != "PEM":
                raise SecurityConfigError(key, "only PEM stores are supported (KIP-651)")
        for key in ("ssl.keystore.password", "ssl.truststore.password"):
            if get(key):
                raise SecurityConfigError(key, "PEM stores have no store password (give ssl.key.password)")
        algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip()
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
            ssl_truststore_certificates=props.get("ssl.truststore.certificates") or None,
            ssl_keystore_location=get("ssl.keystore.location") or None,
            ssl_keystore_certificate_chain=props.get("ssl.keystore.certificate.chain") or None,
            ssl_keystore_key=props.get("ssl.keystore.key") or None,
            ssl_key_password=props.get("ssl.key.password") or None,
            ssl_endpoint_identification_algorithm=algorithm,
            ssl_enabled_protocols=protocols,
            sasl_mechanism=(get("sasl.mechanism") or None),
            sasl_username=username,
            sasl_password=password,
        )


PLAINTEXT = ClientSecurity()
