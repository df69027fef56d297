"""TLS on a broker listener: the server context from a listener's settings, the handshake run
before a connection is served, and the client principal (ssl_principal.py).

The handshake is driven by the event loop's own TLS protocol (uvloop's when the broker runs on
uvloop) set on the accepted socket before anything is read, so a plaintext client or a
handshake of garbage ends in a failed handshake of that one connection, logged with the peer
and OpenSSL's reason (never key material), and a client that never completes its handshake is
dropped after TLS_HANDSHAKE_TIMEOUT_S. Departure: Kafka has no handshake timeout key (a
stalled handshake waits for connections.max.idle.ms there).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import structlog

from broker.security.ssl_principal import Rule, principal
from broker.security.ssl_settings import ListenerSsl, SslSettingsError
from fetcher.security import ClientSecurity, SecurityConfigError, load_key_material, load_trust, tls_versions

log = structlog.get_logger()

TLS_HANDSHAKE_TIMEOUT_S = 10.0
_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(settings: ListenerSsl) -> ssl.SSLContext:
    """The listener's TLS context; reads its PEM or PKCS12 files, SslSettingsError naming the key on failure."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    names = settings.key_names
    try:
        ctx.minimum_version, ctx.maximum_version = tls_versions(names.get("ssl.enabled.protocols",
                                                                          "ssl.enabled.protocols"),
                                                                settings.enabled_protocols)
        load_key_material(ctx, keystore_location=settings.keystore_location,
                          keystore_chain=settings.keystore_certificate_chain, keystore_key=settings.keystore_key,
                          key_password=settings.key_password, key_names=names,
                          keystore_type=settings.keystore_type, keystore_password=settings.keystore_password)
        load_trust(ctx, truststore_location=settings.truststore_location,
                   truststore_certificates=settings.truststore_certificates, key_names=names,
                   truststore_type=settings.truststore_type, truststore_password=settings.truststore_password)
    except SecurityConfigError as e:
        raise SslSettingsError(e.key, "<see the file>", e.why) from None
    ctx.verify_mode = _VERIFY_MODES[settings.client_auth]
    return ctx


def inter_broker_client(settings: ListenerSsl, security_protocol: str) -> ClientSecurity:
    """How this broker connects to the others' inter-broker listener: its own key as the client
    certificate, its truststore for theirs, the listener's host-name check."""
    return ClientSecurity(
        security_protocol=security_protocol,
        ssl_truststore_location=settings.truststore_location,
        ssl_truststore_certificates=settings.truststore_certificates,
        ssl_keystore_location=settings.keystore_location,
        ssl_keystore_certificate_chain=settings.keystore_certificate_chain,
        ssl_keystore_key=settings.keystore_key,
        ssl_key_password=settings.key_password,
        ssl_keystore_type=settings.keystore_type,
        ssl_keystore_password=settings.keystore_password,
        ssl_truststore_type=settings.truststore_type,
        ssl_truststore_password=settings.truststore_password,
        ssl_endpoint_identification_algorithm=settings.endpoint_identification_algorithm,
        ssl_enabled_protocols=settings.enabled_protocols,
    )


@dataclass
class ListenerTls:
    """What a TLS listener needs at accept time."""

    context: ssl.SSLContext
    rules: tuple[Rule, ...]
    handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S

    @classmethod
    def from_settings(cls, settings: ListenerSsl) -> ListenerTls:
        return cls(server_context(settings), settings.principal_rules)

    def principal(self, ssl_object: Any) -> str:
        """User:<mapped subject> of the verified client certificate, User:ANONYMOUS without one;
        NoMatchingRule when no mapping rule applies (the connection is then closed, as Kafka does)."""
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return principal(self.rules, der)

    def protocol_factory(self, listener: str, make_app: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _TlsAccept(self, listener, make_app)


def _ssl_protocol_class(loop: asyncio.AbstractEventLoop) -> Any:
    try:
        import uvloop
        import uvloop.loop
        if isinstance(loop, uvloop.Loop):
            # uvloop's stubs leave out its (Cython) SSLProtocol, which uvloop.loop does define.
            return uvloop.loop.SSLProtocol  # type: ignore[attr-defined]
    except ImportError:
        pass
    import asyncio.sslproto
    return asyncio.sslproto.SSLProtocol


class _TlsAccept(asyncio.Protocol):
    """Sets the loop's TLS protocol on an accepted socket before any byte is read (what
    loop.start_tls does, done synchronously so no byte of the ClientHello goes astray), so the
    handshake's outcome reaches us: a failure is logged here and closes only this socket."""

    def __init__(self, tls: ListenerTls, listener: str, make_app: Callable[[], asyncio.Protocol]) -> None:
        self.tls = tls
        self.listener = listener
        self.make_app = make_app

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        peername = transport.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        waiter = loop.create_future()
        # A stream server's protocol is always given a Transport (typed BaseTransport by asyncio.Protocol).
        stream = cast(asyncio.Transport, transport)
        proto = _ssl_protocol_class(loop)(loop, self.make_app(), self.tls.context, waiter, server_side=True,
                                          ssl_handshake_timeout=self.tls.handshake_timeout_s)

        def handshake_done(fut: asyncio.Future[None]) -> None:
            exc = None if fut.cancelled() else fut.exception()
            if exc is None:
                return
            # OpenSSL's reason (WRONG_VERSION_NUMBER, CERTIFICATE_VERIFY_FAILED…) names no secret.
            reason = getattr(exc, "reason", None) or type(exc).__name__
            log.warning("connection.tls_handshake_failed", peer=peer, listener=self.listener, reason=str(reason))
            stream.abort()

        waiter.add_done_callback(handshake_done)
        transport.set_protocol(proto)
        proto.connection_made(transport)

    def data_received(self, data: bytes) -> None:  # never: the TLS protocol has taken over
        pass
