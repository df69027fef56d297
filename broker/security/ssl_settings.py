"""A TLS listener's settings, read with Kafka's per-listener prefix and checked (no file I/O).

Each key may be given as `listener.name.<lowercase listener name>.<key>` (wins) or bare; an error
names the key that was given. Stores are PEM (KIP-651; also when `ssl.keystore.type` /
`ssl.truststore.type` are left out, where Kafka's default is JKS) or PKCS12 with
`ssl.keystore.password` / `ssl.truststore.password` (fetcher.security.check_stores: the rules,
shared with the clients); JKS is refused, naming the key. Every value is trimmed (Kafka's ConfigDef
on STRING and PASSWORD keys), from the file, an --override or a KAFKA_* variable alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from broker.security.ssl_principal import Rule, parse_rules
from fetcher.security import SecurityConfigError, check_stores, tls_versions, trimmed

CLIENT_AUTH = ("none", "requested", "required")
DEFAULT_ENABLED_PROTOCOLS = "TLSv1.2,TLSv1.3"


class SslSettingsError(ValueError):
    def __init__(self, key: str, value: str, why: str) -> None:
        super().__init__(f"invalid value for configuration {key}: {why}")
        self.key = key
        self.value = value
        self.why = why


class ListenerSettings(Protocol):
    """What BrokerConfig offers (broker/config.py): a setting and the key that supplied it."""

    def listener_setting(self, listener_name: str, key: str, default: str | None = None) -> str | None: ...

    def listener_setting_key(self, listener_name: str, key: str) -> str: ...


_SECRET_KEYS = frozenset({"ssl.keystore.key", "ssl.key.password", "ssl.keystore.password",
                          "ssl.truststore.password"})


@dataclass(frozen=True)
class ListenerSsl:
    listener: str
    keystore_location: str | None
    keystore_certificate_chain: str | None = field(repr=False)
    keystore_key: str | None = field(repr=False)
    key_password: str | None = field(repr=False)
    truststore_location: str | None
    truststore_certificates: str | None = field(repr=False)
    client_auth: str
    enabled_protocols: str
    principal_rules: tuple[Rule, ...]
    endpoint_identification_algorithm: str
    keystore_type: str = "PEM"  # or PKCS12
    keystore_password: str | None = field(default=None, repr=False)
    truststore_type: str = "PEM"
    truststore_password: str | None = field(default=None, repr=False)
    # bare key -> the key that supplied it (prefixed or not), for messages
    key_names: dict[str, str] = field(default_factory=dict, repr=False)


def listener_ssl_settings(cfg: ListenerSettings, listener: str, security_protocol: str = "SSL") -> ListenerSsl:
    """The TLS settings of an SSL or SASL_SSL listener, checked; SslSettingsError names the key."""
    names: dict[str, str] = {}

    def get(key: str, default: str | None = None) -> str | None:
        names[key] = cfg.listener_setting_key(listener, key)
        # Trimmed as Kafka's ConfigDef does, every key alike (inline PEM too: normalize_pem
        # re-wraps it), whether the file, an --override or a KAFKA_* variable gave it.
        return trimmed(cfg.listener_setting(listener, key, default))

    def fail(key: str, why: str) -> SslSettingsError:
        raw = cfg.listener_setting(listener, key) or ""
        return SslSettingsError(names.get(key, key), "<hidden>" if key in _SECRET_KEYS or len(raw) > 200 else raw,
                                why)

    # Departure: a PEM keystore file with an unencrypted key is accepted without ssl.key.password.
    try:
        keystore_type, truststore_type = check_stores(get)
    except SecurityConfigError as e:
        raise fail(e.key, e.why) from None
    location = get("ssl.keystore.location") or None
    chain = get("ssl.keystore.certificate.chain") or None
    key_pem = get("ssl.keystore.key") or None
    if location and (chain or key_pem):
        raise fail("ssl.keystore.location", "give ssl.keystore.location or ssl.keystore.certificate.chain "
                                            "with ssl.keystore.key, not both")
    if not location and not (chain and key_pem):
        missing = ("ssl.keystore.location" if not (chain or key_pem)
                   else "ssl.keystore.key" if chain else "ssl.keystore.certificate.chain")
        raise fail(missing, f"listener {listener} uses TLS and needs a key and certificate chain "
                            "(ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key)")
    trust_location = get("ssl.truststore.location") or None
    trust_pem = get("ssl.truststore.certificates") or None
    if trust_location and trust_pem:
        raise fail("ssl.truststore.location", "give ssl.truststore.location or ssl.truststore.certificates, "
                                              "not both")
    client_auth = (get("ssl.client.auth", "none") or "none").lower()
    if security_protocol == "SASL_SSL" and names["ssl.client.auth"] == "ssl.client.auth":
        # KIP-684 (Kafka 2.8): on SASL_SSL only the listener-prefixed ssl.client.auth applies.
        client_auth = "none"
    if client_auth not in CLIENT_AUTH:
        raise fail("ssl.client.auth", f"expected one of {', '.join(CLIENT_AUTH)}")
    if client_auth != "none" and not (trust_location or trust_pem):
        raise fail("ssl.client.auth", f"{client_auth} needs ssl.truststore.location or "
                                      "ssl.truststore.certificates to verify client certificates")
    protocols = get("ssl.enabled.protocols", DEFAULT_ENABLED_PROTOCOLS) or ""
    try:
        tls_versions(names["ssl.enabled.protocols"], protocols)
    except SecurityConfigError as e:
        raise fail("ssl.enabled.protocols", e.why) from None
    try:
        rules = parse_rules(get("ssl.principal.mapping.rules", "DEFAULT") or "DEFAULT")
    except ValueError as e:
        raise fail("ssl.principal.mapping.rules", str(e)) from None
    algorithm = get("ssl.endpoint.identification.algorithm", "https") or ""
    if algorithm.lower() not in ("", "https"):
        raise fail("ssl.endpoint.identification.algorithm", "expected https or empty")
    return ListenerSsl(listener, location, chain, key_pem, get("ssl.key.password") or None,
                       trust_location, trust_pem, client_auth, protocols, rules, algorithm,
                       keystore_type, get("ssl.keystore.password") or None,
                       truststore_type, get("ssl.truststore.password") or None, names)
