"""Certificates for TLS tests, made with trustme: one CA, a broker certificate for 127.0.0.1 and
localhost, client certificates by common name; written as the PEM files Kafka's KIP-651 keys name,
or as PKCS12 stores made three ways: by `cryptography`, by the `openssl` command, by Java's `keytool`."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12


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


def pkcs12_keystore(identity: Identity, path: Path, password: str, made_by: str = "cryptography") -> Path:
    """`identity`'s key and chain as a PKCS12 key store, made by `cryptography` or the `openssl` command."""
    if made_by == "openssl":
        subprocess.run(["openssl", "pkcs12", "-export", "-in", str(identity.pem), "-inkey", str(identity.pem),
                        "-name", "me", "-out", str(path), "-passin", "env:KEY_PW", "-passout", "env:STORE_PW"],
                       check=True, capture_output=True, env={"KEY_PW": "", "STORE_PW": password})
        return path
    key = serialization.load_pem_private_key(identity.key.encode(), None)
    certs = x509.load_pem_x509_certificates(identity.chain.encode())
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        b"me", key, certs[0], certs[1:], serialization.BestAvailableEncryption(password.encode())))  # type: ignore[arg-type]
    return path


def pkcs12_truststore(ca_pem: Path, path: Path, password: str, made_by: str = "cryptography") -> Path:
    """The CA certificate as a PKCS12 trust store: by `cryptography`, or by Java's keytool (a
    trusted-certificate entry, as Kafka's own docs make them)."""
    if made_by == "keytool":
        subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
                        "-keystore", str(path), "-storetype", "PKCS12", "-storepass:env", "STORE_PW"],
                       check=True, capture_output=True, env={"STORE_PW": password, "PATH": "/usr/bin:/bin"})
        return path
    ca = x509.load_pem_x509_certificate(ca_pem.read_bytes())
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca], serialization.BestAvailableEncryption(password.encode())))
    return path
