"""The TLS handshake in front of a listener (broker/security/ssl_listener.py) on the uvloop loop the
broker runs on: a stalled handshake is dropped after its timeout, garbage closes only its own
socket, each logged without key material, while a real TLS client is served meanwhile."""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from pathlib import Path

import pytest
import uvloop
from structlog.testing import capture_logs

from broker.config import build_config
from broker.security.ssl_listener import ListenerTls
from broker.security.ssl_settings import listener_ssl_settings
from tests.support.tls import Certificates


async def test_garbage_and_stalled_handshakes_close_only_their_socket(tmp_path: Path) -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
    certs = Certificates(tmp_path)
    server, alice = certs.issue("broker", "127.0.0.1", key_password="pw"), certs.issue("alice")
    cfg = build_config({"broker.id": "0", "listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL",
                        "ssl.keystore.location": str(server.pem), "ssl.key.password": "pw",
                        "ssl.truststore.location": str(certs.ca_pem), "ssl.client.auth": "requested",
                        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/U"})
    tls = ListenerTls.from_settings(listener_ssl_settings(cfg, "SSL"))
    tls.handshake_timeout_s = 0.5
    principals: list[str] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        principals.append(tls.principal(writer.get_extra_info("ssl_object")))
        while data := await reader.read(100):
            writer.write(data)
        writer.close()

    def app() -> asyncio.Protocol:
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(), echo)

    loop = asyncio.get_running_loop()
    srv = await loop.create_server(tls.protocol_factory("SSL", app), "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cafile=str(certs.ca_pem))
    try:
        with capture_logs() as logs:
            good_r, good_w = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
            stalled_r, stalled_w = await asyncio.open_connection("127.0.0.1", port)  # says nothing
            junk_r, junk_w = await asyncio.open_connection("127.0.0.1", port)
            junk_w.write(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test")
            assert await asyncio.wait_for(junk_r.read(10), 5) == b""
            good_w.write(b"ping")
            assert await good_r.readexactly(4) == b"ping"
            assert await asyncio.wait_for(stalled_r.read(10), 5) == b""  # dropped after 0.5 s
            good_w.write(b"pong")
            assert await good_r.readexactly(4) == b"pong"
            # A client certificate (ssl.client.auth=requested) gives the mapped principal.
            with_cert = ssl.create_default_context(cafile=str(certs.ca_pem))
            with_cert.load_cert_chain(str(alice.pem))
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=with_cert, server_hostname="127.0.0.1")
            w.write(b"x")
            await r.readexactly(1)
            w.close()
        failed = [e for e in logs if e["event"] == "connection.tls_handshake_failed"]
        assert sorted(e["reason"] for e in failed) == sorted(["WRONG_VERSION_NUMBER", "ConnectionAbortedError"])
        assert "BEGIN" not in repr(logs) and "'pw'" not in repr(logs)
        assert principals == ["User:ANONYMOUS", "User:ALICE"]
        # A subject no rule matches (here the peer certificate the client side sees, CN=broker): Kafka
        # fails the authentication, and the listener closes that connection.
        from broker.security.ssl_principal import NoMatchingRule, parse_rules
        strict = ListenerTls(tls.context, parse_rules("RULE:^CN=bob,.*$/bob/"))
        with pytest.raises(NoMatchingRule):
            strict.principal(w.get_extra_info("ssl_object"))
        for w in (good_w, stalled_w, junk_w):
            w.close()
    finally:
        srv.close()


def test_unreadable_key_material_is_refused_naming_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.security.ssl_settings import SslSettingsError
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the inline key is written for a moment
    certs = Certificates(tmp_path)
    server = certs.issue("broker", "127.0.0.1", key_password="pw")
    base = {"broker.id": "0", "listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL"}
    inline = build_config({**base, "listener.name.ssl.ssl.keystore.certificate.chain": server.chain,
                           "listener.name.ssl.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nAAAA\n"
                                                                 "-----END PRIVATE KEY-----\n"})
    with pytest.raises(SslSettingsError) as e:
        ListenerTls.from_settings(listener_ssl_settings(inline, "SSL"))
    assert e.value.key == "listener.name.ssl.ssl.keystore.key"
    assert "AAAA" not in str(e.value)
    wrong = build_config({**base, "ssl.keystore.location": str(server.pem), "ssl.key.password": "nope"})
    with pytest.raises(SslSettingsError) as e:
        ListenerTls.from_settings(listener_ssl_settings(wrong, "SSL"))
    assert e.value.key == "ssl.keystore.location" and "ssl.key.password" in e.value.why
    good = build_config({**base, "ssl.keystore.certificate.chain": server.chain, "ssl.keystore.key": server.key,
                         "ssl.key.password": "pw"})
    assert ListenerTls.from_settings(listener_ssl_settings(good, "SSL")).context.verify_mode == ssl.CERT_NONE
    assert not list(scratch.iterdir())  # each inline key's temporary file is gone once loaded
