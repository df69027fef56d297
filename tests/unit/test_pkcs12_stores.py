"""PKCS12 key and trust stores (fetcher.security): made here with `cryptography`, loaded into
real SSLContexts, and a TLS handshake between them run over memory BIOs (no sockets).

What is held: the key store's key and chain serve a handshake the trust store's CA verifies
(and a client certificate the other way); a wrong or missing password is refused naming the key,
never showing the password; the key reaches the temporary file only encrypted, and the file is
gone after the load.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from fetcher.security import ClientSecurity, SecurityConfigError, load_key_material, load_trust

PASSWORD = "p12-Store-pw"


def _keystore(ca: trustme.CA, path: Path, *hosts: str, password: str | None = PASSWORD) -> Path:
    leaf = ca.issue_cert(*hosts)
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    cert = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes())
    cas = [x509.load_pem_x509_certificate(b.bytes()) for b in leaf.cert_chain_pems[1:]]
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    path.write_bytes(pkcs12.serialize_key_and_certificates(b"me", key, cert, cas, encryption))  # type: ignore[arg-type]
    return path


def _truststore(ca: trustme.CA, path: Path, password: str | None = PASSWORD) -> Path:
    cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    path.write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, [cert], encryption))
    return path


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> ssl.SSLObject:
    """A whole TLS handshake between the two contexts over memory BIOs; the server's SSLObject."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, side in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return s
    raise AssertionError("the handshake did not finish")


def test_a_pkcs12_key_store_serves_and_a_pkcs12_trust_store_verifies(tmp_path: Path) -> None:
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_key_material(server, keystore_type="PKCS12", keystore_location=str(_keystore(ca, tmp_path / "b.p12",
                                                                                     "broker.test")),
                      keystore_password=PASSWORD)
    assert load_trust(server, truststore_type="PKCS12", truststore_location=str(_truststore(ca, tmp_path / "t.p12")),
                      truststore_password=PASSWORD)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ClientSecurity(security_protocol="SSL", ssl_keystore_type="PKCS12",
                            ssl_keystore_location=str(_keystore(ca, tmp_path / "c.p12", "client.test")),
                            ssl_keystore_password=PASSWORD, ssl_truststore_type="PKCS12",
                            ssl_truststore_location=str(tmp_path / "t.p12"),
                            ssl_truststore_password=PASSWORD).ssl_context()
    assert client is not None
    s = _handshake(server, client, "broker.test")
    peer = s.getpeercert()
    assert peer and ("DNS", "client.test") in peer["subjectAltName"]


def test_a_trust_store_without_encryption_needs_no_password_and_another_ca_is_not_trusted(tmp_path: Path) -> None:
    ca, other = trustme.CA(), trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_key_material(server, keystore_type="PKCS12", keystore_location=str(_keystore(other, tmp_path / "b.p12",
                                                                                     "broker.test")),
                      keystore_password=PASSWORD)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    assert load_trust(client, truststore_type="PKCS12",
                      truststore_location=str(_truststore(ca, tmp_path / "t.p12", password=None)))
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server, client, "broker.test")


@pytest.mark.parametrize("password", ["wrong-pw", None])
def test_a_wrong_or_missing_password_is_refused_naming_the_key(tmp_path: Path, password: str | None) -> None:
    ca = trustme.CA()
    keystore, truststore = _keystore(ca, tmp_path / "b.p12", "broker.test"), _truststore(ca, tmp_path / "t.p12")
    names = {"ssl.keystore.location": "listener.name.ssl.ssl.keystore.location",
             "ssl.keystore.password": "listener.name.ssl.ssl.keystore.password"}
    with pytest.raises(SecurityConfigError) as e:
        load_key_material(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), keystore_type="PKCS12",
                          keystore_location=str(keystore), keystore_password=password, key_names=names)
    assert e.value.key == "listener.name.ssl.ssl.keystore.location"
    assert "listener.name.ssl.ssl.keystore.password" in e.value.why and "wrong-pw" not in str(e.value)
    with pytest.raises(SecurityConfigError) as e:
        load_trust(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), truststore_type="PKCS12",
                   truststore_location=str(truststore), truststore_password=password)
    assert e.value.key == "ssl.truststore.location"
    assert ("wrong" if password else "needed") in e.value.why and "wrong-pw" not in str(e.value)


def test_files_that_are_not_pkcs12_stores(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(pem))
    with pytest.raises(SecurityConfigError) as e:
        load_key_material(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), keystore_type="PKCS12",
                          keystore_location=str(pem), keystore_password=PASSWORD)
    assert e.value.key == "ssl.keystore.location" and "not a PKCS12 key store" in e.value.why
    with pytest.raises(SecurityConfigError) as e:
        load_key_material(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), keystore_type="PKCS12",
                          keystore_location=str(tmp_path / "missing.p12"), keystore_password=PASSWORD)
    assert e.value.key == "ssl.keystore.location" and e.value.why == "file not found"
    # A trust store (certificates only) given as a key store: no key in it.
    with pytest.raises(SecurityConfigError) as e:
        load_key_material(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), keystore_type="PKCS12",
                          keystore_location=str(_truststore(trustme.CA(), tmp_path / "t.p12")),
                          keystore_password=PASSWORD)
    assert "no private key" in e.value.why


class _Spy(ssl.SSLContext):
    """Records what the temporary key file held when it was loaded."""

    seen: list[tuple[str, int, bytes]]

    def load_cert_chain(self, certfile, keyfile=None, password=None) -> None:  # type: ignore[no-untyped-def, override]
        self.seen.append((certfile, os.stat(certfile).st_mode & 0o777, Path(certfile).read_bytes()))
        super().load_cert_chain(certfile, keyfile, password)


def test_the_key_reaches_the_temporary_file_encrypted_and_the_file_is_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    ctx = _Spy(ssl.PROTOCOL_TLS_SERVER)
    ctx.seen = []
    load_key_material(ctx, keystore_type="PKCS12", keystore_location=str(_keystore(ca, tmp_path / "b.p12", "b.test")),
                      keystore_password=PASSWORD)
    [(path, mode, content)] = ctx.seen
    assert Path(path).parent == temp and mode == 0o600
    assert content.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert b"-----BEGIN PRIVATE KEY-----" not in content and b"BEGIN CERTIFICATE" in content
    assert os.listdir(temp) == []


class _RefusesCertificates(ssl.SSLContext):
    """OpenSSL refusing a certificate that cryptography read from the store (no real certificate
    makes it: both parse the same DER), as load_verify_locations reports it."""

    def load_verify_locations(self, cafile=None, capath=None, cadata=None) -> None:  # type: ignore[no-untyped-def, override]
        error = ssl.SSLError(ssl.SSL_ERROR_SSL, "[X509] refused")
        error.reason = "CERT_REFUSED"  # type: ignore[misc]
        raise error


def test_a_certificate_openssl_refuses_in_a_pkcs12_trust_store_names_the_key(tmp_path: Path) -> None:
    truststore = _truststore(trustme.CA(), tmp_path / "t.p12")
    with pytest.raises(SecurityConfigError) as e:
        load_trust(_RefusesCertificates(ssl.PROTOCOL_TLS_CLIENT), truststore_type="PKCS12",
                   truststore_location=str(truststore), truststore_password=PASSWORD,
                   key_names={"ssl.truststore.location": "listener.name.ssl.ssl.truststore.location"})
    assert e.value.key == "listener.name.ssl.ssl.truststore.location"
    assert "cannot be trusted (CERT_REFUSED)" in e.value.why and PASSWORD not in str(e.value)
    with pytest.raises(SecurityConfigError) as e:
        load_trust(_RefusesCertificates(ssl.PROTOCOL_TLS_CLIENT), truststore_type="PKCS12",
                   truststore_location=str(truststore), truststore_password=PASSWORD)
    assert e.value.key == "ssl.truststore.location"


# ---- every ssl.* value is trimmed (Kafka's ConfigDef), whichever way it was given ----------------------

def _padded(value: str) -> str:
    return f" \t{value} \t "


def _padded_stores(tmp_path: Path) -> dict[str, str]:
    """PKCS12 key and trust store settings, each value wrapped in blanks and tabs."""
    ca = trustme.CA()
    keystore, truststore = _keystore(ca, tmp_path / "b.p12", "broker.test"), _truststore(ca, tmp_path / "t.p12")
    return {"ssl.keystore.type": _padded("PKCS12"), "ssl.keystore.location": _padded(str(keystore)),
            "ssl.keystore.password": _padded(PASSWORD), "ssl.key.password": _padded(PASSWORD),
            "ssl.truststore.type": _padded("pkcs12"), "ssl.truststore.location": _padded(str(truststore)),
            "ssl.truststore.password": _padded(PASSWORD), "ssl.endpoint.identification.algorithm": _padded(""),
            "ssl.enabled.protocols": _padded("TLSv1.2,TLSv1.3")}


def _env_name(key: str) -> str:
    return "KAFKA_" + key.upper().replace(".", "_")


@pytest.mark.parametrize("path", ["file", "override", "env"])
def test_the_broker_trims_its_ssl_values_on_every_path(tmp_path: Path, path: str) -> None:
    from broker.config import build_config, load_config
    from broker.security.ssl_listener import inter_broker_client, server_context
    from broker.security.ssl_settings import listener_ssl_settings

    base = {"broker.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "security.inter.broker.protocol": "SSL"}
    # The trust store's keys listener-prefixed, the others bare: both readings are trimmed.
    stores = {(f"listener.name.ssl.{k}" if k.startswith("ssl.truststore.") else k): v
              for k, v in _padded_stores(tmp_path).items()}
    if path == "file":
        server_properties = tmp_path / "server.properties"
        server_properties.write_text("".join(f"{k}={v}\n" for k, v in {**base, **stores}.items()))
        cfg = load_config(server_properties)
    elif path == "override":
        cfg = build_config(base, [f"{k}={v}" for k, v in stores.items()])
    else:
        cfg = build_config(base, environ={_env_name(k): v for k, v in stores.items()})
    settings = listener_ssl_settings(cfg, "SSL")
    assert (settings.keystore_type, settings.keystore_password, settings.key_password, settings.truststore_type,
            settings.truststore_password) == ("PKCS12", PASSWORD, PASSWORD, "PKCS12", PASSWORD)
    assert settings.keystore_location == str(tmp_path / "b.p12")
    assert settings.truststore_location == str(tmp_path / "t.p12")
    server = server_context(settings)  # opens both stores
    client = inter_broker_client(settings, "SSL").ssl_context()
    assert client is not None
    _handshake(server, client, "broker.test")


def test_client_properties_are_trimmed_for_the_tools_and_for_spark_options(tmp_path: Path) -> None:
    from broker.tools.tool_support import command_config
    from pipeline.options import client_security

    stores = {"security.protocol": _padded("SSL"), **_padded_stores(tmp_path)}
    from_properties = ClientSecurity.from_properties(stores)
    from_spark = client_security({f"kafka.{k}": v for k, v in stores.items()})
    command_config_file = tmp_path / "client.properties"
    command_config_file.write_text("".join(f"{k}={v}\n" for k, v in stores.items()))
    from_tools = command_config(str(command_config_file))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_key_material(server, keystore_type="PKCS12", keystore_location=str(tmp_path / "b.p12"),
                      keystore_password=PASSWORD)
    for security in (from_properties, from_spark, from_tools):
        assert (security.ssl_keystore_type, security.ssl_keystore_location, security.ssl_keystore_password,
                security.ssl_truststore_type, security.ssl_truststore_location, security.ssl_truststore_password,
                security.ssl_endpoint_identification_algorithm) == (
            "PKCS12", str(tmp_path / "b.p12"), PASSWORD, "PKCS12", str(tmp_path / "t.p12"), PASSWORD, "")
        client = security.ssl_context()  # opens both stores
        assert client is not None
        _handshake(server, client, "broker.test")
