"""Request dispatch: header, version check, decode, handler, encode, in order.

Each served API key has one module in `broker/apis/`, which registers its handler for the
key and versions its protocol/messages module declares (broker.apis.registry); registering
is what puts it in the ApiVersions table (protocol.registry), so the table cannot drift
from what is really served.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from broker.security.acl import ANONYMOUS
from broker.security.sasl_listeners import SASL_PROTOCOLS
from broker.security.sasl_session import State as SaslState
from broker.security.sasl_session import Verdict
from protocol import registry
from protocol.api_keys import ApiKey
from protocol.errors import ProtocolError
from protocol.framing import frame
from protocol.headers import decode_request_header, encode_response_header
from protocol.layouts import FRAME_SIZE, RESPONSE_HEADER
from protocol.schema import request_codec, response_codec

if TYPE_CHECKING:
    from broker.apis.context import BrokerServices, DispatchHost
    from broker.apis.registry import Api
    from broker.metrics import CounterSeries, HistogramSeries
    from broker.network import Connection

log = structlog.get_logger()

# APIs whose wait may be cut short when the client goes (broker.network.Connection.run_abandonable):
# a Fetch only reads; a Produce appends before it waits (acks=all, the KIP-13 delay), so a
# cancelled wait drops only a response nobody would read. Admin and controller requests
# always run to the end.
ABANDONABLE = frozenset({ApiKey.FETCH, ApiKey.PRODUCE})
# APIs started in the connection's reading task, up to their first wait (broker.network.
# Connection.start, eager): the data path, whose handlers use nothing bound to the task they run
# in before they wait (a wait that may reach ZooKeeper, whose calls use asyncio.timeout, first
# leaves the reading task: Connection.leave_reader). The frame starts with the API key (int16).
_EAGER_FIRST_BYTE = 0
_EAGER_SECOND_BYTES = frozenset({int(ApiKey.PRODUCE), int(ApiKey.FETCH)})


@dataclass
class RequestContext:
    services: BrokerServices  # all a handler may use of the broker
    conn: Connection
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    received: float
    size: int = 0
    # Set by a handler whose response waits out a client quota (KIP-13): the dispatcher
    # sends it that much later, and reads nothing from the connection meanwhile.
    hold_ms: int = 0
    # Who is asking, for the authorizer (broker/apis/authorization.py). User:ANONYMOUS on a
    # PLAINTEXT listener, as Kafka; SASL/TLS will set the connection's `principal`.
    principal: str = ANONYMOUS

    @property
    def host(self) -> str:
        """The client's address, as ACL hosts name it."""
        return self.conn.ip


class Dispatcher:
    def __init__(self, broker: DispatchHost, apis: list[Api]) -> None:
        self.services: BrokerServices = broker
        self.handlers: dict[int, Api] = {api.key: api for api in apis}
        self.names: dict[int, str] = {api.key: api.name for api in apis}
        if self.handlers.keys() != registry.SERVED.keys():
            raise ValueError("the dispatcher serves exactly the registered APIs (broker.apis.ALL_APIS)")
        m = broker.metrics
        self.requests_total = m.counter("requests_total", "Requests handled, by API")
        self.latency = m.histogram("request_latency_seconds", "Time from receipt to response, by API")
        # Each API's two series, found once: counted on every request.
        self._series: dict[int, tuple[CounterSeries, HistogramSeries]] = {}
        # What a served (key, version) needs on every request, found once (_route).
        self._routes: dict[tuple[int, int], _Route] = {}

    def _route(self, key: int, version: int) -> _Route | None:
        """The handler module, its decoder, name, request series and response header flag of a
        served (key, version); None for one not served. At most one entry per served version."""
        route = self._routes.get((key, version))
        if route is None:
            mod = self.handlers.get(key)
            if mod is None or not registry.is_served(key, version):
                return None
            name = self.names[key]
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = (self.requests_total.series(api=name), self.latency.series(api=name))
            decode = getattr(mod, "decode", None)
            if decode is None:  # the schema codec, which takes the body alone
                codec = request_codec(key, version)

                def decode(buf: memoryview, _version: int) -> Any:  # noqa: ANN401 - the schema's dict
                    return codec.decode(buf)
            route = self._routes[(key, version)] = _Route(
                mod, decode, name, series[0], series[1], encode_response_header(0, key, version)[RESPONSE_HEADER.size:])
        return route

    @staticmethod
    def starts_at_once(frame_bytes: bytes | bytearray | memoryview) -> bool:
        """Whether this request is started in the reading task (Connection.start, eager)."""
        return len(frame_bytes) >= 2 and frame_bytes[0] == _EAGER_FIRST_BYTE and frame_bytes[1] in _EAGER_SECOND_BYTES

    async def handle(self, conn: Connection, frame_bytes: bytes | bytearray | memoryview) -> bool:
        """Answer one request; False closes the connection."""
        received = time.monotonic()
        try:
            header, body_at = decode_request_header(frame_bytes)
        except ProtocolError as e:
            log.warning("request.bad_header", peer=conn.peer, error=str(e))
            return False
        key, version = header.api_key, header.api_version
        route = self._route(key, version)
        if route is None and key not in self.handlers:
            log.warning("request.unknown_api_key", peer=conn.peer, api_key=key)
            return False
        # SASL listeners: before authentication only ApiVersions, SaslHandshake and SaslAuthenticate.
        # (A connection of a listener that is not SASL has no session: not looked up.)
        session = self.services.sasl.session(conn) if getattr(conn, "security_protocol", "") in SASL_PROTOCOLS \
            else None
        if session is not None:
            # (A frame above sasl.server.max.receive.size was refused before it was read: network.py.)
            verdict = session.gate(key, registry.is_served(key, version))
            if verdict is not Verdict.PASS:
                if verdict is Verdict.CLOSE_AFTER_DELAY:
                    why = f"{self.names[key]} request during authentication"
                    await asyncio.sleep(self.services.sasl.failed(conn, session, why))
                else:
                    log.warning("sasl.connection_closed", peer=conn.peer, api=self.names[key],
                                reason="session expired" if session.authenticated else "unexpected request")
                return False
        if route is None:  # a known key at a version not served
            if key == ApiKey.API_VERSIONS:
                body = registry.unsupported_api_versions_body()
                conn.write(frame(encode_response_header(header.correlation_id, key, 0), body))
                return True
            log.warning("request.unsupported_version", peer=conn.peer, api_key=key, api_version=version)
            return False
        ctx = RequestContext(self.services, conn, key, version, header.correlation_id,
                             header.client_id or "", received, 4 + len(frame_bytes),
                             principal=getattr(conn, "principal", ANONYMOUS))
        mod = route.mod
        try:
            request: Any = route.decode(memoryview(frame_bytes)[body_at:], version)
        except ProtocolError as e:
            log.warning("request.malformed", peer=conn.peer, api=route.name, api_version=version, error=str(e))
            return False
        if key != ApiKey.PRODUCE and conn.appends_pending:
            # Earlier Produce appends of this connection are still being written: this request
            # starts once they are in the log, as if requests ran one at a time.
            await conn.next_may_start()
        if key in ABANDONABLE:
            # Connection.run_abandonable, without a coroutine of its own.
            req = conn.begin_abandonable()
            try:
                response = await mod.handle(ctx, request)
            finally:
                if req is not None:
                    req.abandonable = False
        else:
            response = await mod.handle(ctx, request)
        if response is None:  # acks=0 produce: Kafka sends nothing back
            route.count(received)
            return True
        pieces = response if isinstance(response, list) else [response_codec(key, version).encode(response)]
        # The response header: the correlation id, and an empty tagged section at flexible versions.
        head = RESPONSE_HEADER.pack(header.correlation_id) + route.header_tail
        framed = [FRAME_SIZE.pack(len(head) + sum(map(len, pieces))), head, *pieces]
        if ctx.hold_ms > 0:
            conn.hold(framed, ctx.hold_ms / 1000)
        else:
            conn.write(framed)
        route.count(received)
        return session is None or session.state is not SaslState.FAILED  # a SASL failure closes, once answered




class _Route:
    """A served (api key, version): what Dispatcher.handle looks up on every request."""

    __slots__ = ("mod", "decode", "name", "requests", "latency", "header_tail")

    def __init__(self, mod: Api, decode: Callable[[memoryview, int], Any], name: str, requests: CounterSeries,
                 latency: HistogramSeries, header_tail: bytes) -> None:
        self.mod = mod
        self.decode = decode
        self.name = name
        self.requests = requests
        self.latency = latency
        self.header_tail = header_tail  # after the correlation id: b"" or an empty tagged section

    def count(self, received: float) -> None:
        """One request answered (or dropped: acks=0) `received` (monotonic) ago."""
        self.requests.inc()
        self.latency.observe(time.monotonic() - received)
