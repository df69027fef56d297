"""Certificates for TLS tests, made with trustme: one CA, a broker certificate for 127.0.0.1 and
localhost, client certificates by common name; written as the PEM files Kafka's KIP-651 keys name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization


@dataclass
class Identity:
    """A certificate and its key: `pem` holds both (ssl.keystore.location), `chain`/`key` apart."""

    pem: Path
    chain: str
    key: str
    subject: str  # RFC 4514 (= Kafka's RFC 2253 form for these names)


class Certificates:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca = trustme.CA(organization_name="minibroker tests", organization_unit_name="ca")
        self.ca_pem = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_pem))
        self.ca_text = self.ca.cert_pem.bytes().decode()

    def issue(self, name: str, *hosts: str, common_name: str | None = None,
              unit: str | None = None, key_password: str | None = None) -> Identity:
        cert = self.ca.issue_cert(*(hosts or (f"{name}.example.com",)), common_name=common_name or name,
                                  organization_name="minibroker tests", organization_unit_name=unit or "clients")
        chain = "".join(b.bytes().decode() for b in cert.cert_chain_pems)
        key_bytes = cert.private_key_pem.bytes()
        if key_password is not None:
            pk = serialization.load_pem_private_key(key_bytes, None)
            key_bytes = pk.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(key_password.encode()))
        key = key_bytes.decode()
        pem = self.dir / f"{name}.pem"
        pem.write_text(key + chain)
        pem.chmod(0o600)
        subject = x509.load_pem_x509_certificate(chain.encode()).subject.rfc4514_string()
        return Identity(pem, chain, key, subject)

    def write(self, identity: Identity, name: str) -> tuple[Path, Path]:
        """The certificate chain and the key in files of their own (librdkafka's and KafkaJS's form)."""
        cert, key = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        cert.write_text(identity.chain)
        key.write_text(identity.key)
        key.chmod(0o600)
        return cert, key


def continued(value: str) -> str:
    """A multi-line value as Java properties continuation lines (an inline PEM in a properties file)."""
    return " \\\n    ".join(value.strip().splitlines())
