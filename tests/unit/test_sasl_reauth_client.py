"""KIP-368 on the client side, on a fake clock: `sasl_client.ReauthSchedule` (when), and
`KafkaConnection` re-authenticating on its own socket (how) against a peer that judges each
request with the broker's own SASL session (`broker.security.sasl_session`, the gate the
dispatcher asks), so a request slipped into the exchange, or one sent after the session expired,
closes the connection here as it would on a broker.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from broker.security.sasl_listeners import SaslListeners
from broker.security.sasl_scram import CredentialCache
from broker.security.sasl_session import Verdict
from fetcher.connection import KafkaConnection
from fetcher.sasl_client import ReauthSchedule
from fetcher.security import ClientSecurity
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.headers import decode_request_header, encode_response_header
from protocol.schema import request_codec, response_codec

LIFETIME_MS = 10_000
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_alice="alice-secret";')
ALICE = ClientSecurity(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="alice",
                       sasl_password="alice-secret")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- the schedule -------------------------------------------------------------------------------

def test_reauthentication_falls_between_85_and_95_percent_of_the_lifetime() -> None:
    clock = Clock()
    for jitter, at in ((0.0, 8.5), (0.5, 9.0), (0.999999, 9.5)):
        s = ReauthSchedule(clock, jitter=lambda j=jitter: j)
        s.authenticated(LIFETIME_MS)
        assert s.due_at == pytest.approx(clock.now + at, abs=1e-4)
        clock.now = s.due_at - 0.001
        assert not s.due()
        clock.now = s.due_at
        assert s.due()
        # The next one counts from the re-authentication's own answer.
        clock.now += 3
        s.authenticated(LIFETIME_MS)
        assert s.due_at == pytest.approx(clock.now + at, abs=1e-4) and not s.due()


def test_random_jitter_stays_in_the_window() -> None:
    clock = Clock()
    s = ReauthSchedule(clock)
    delays = set()
    for _ in range(200):
        s.authenticated(LIFETIME_MS)
        assert s.due_at is not None
        delay = s.due_at - clock.now
        assert 8.5 <= delay < 9.5
        delays.add(round(delay, 3))
    assert len(delays) > 1  # jittered, not one fixed point


def test_no_lifetime_means_no_reauthentication() -> None:
    clock = Clock()
    s = ReauthSchedule(clock)
    assert not s.due()
    s.authenticated(LIFETIME_MS)
    s.authenticated(0)  # a broker without connections.max.reauth.ms (or SaslAuthenticate v0)
    clock.now += 10 ** 6
    assert not s.due()


# ---- the connection, against the broker's gate ---------------------------------------------------

@dataclass
class Peer:
    """A socket peer with the broker's SASL session per connection: SaslHandshake/SaslAuthenticate
    answered by it, anything else echoed as `ok` once the gate passes it (a Fetch after a pause, to
    be in flight when re-authentication starts). `seen` is (connection number, api key) in order."""

    clock: Clock
    seen: list[tuple[int, int]] = field(default_factory=list)
    connections: int = 0
    closed_by_gate: list[str] = field(default_factory=list)
    refuse_reauth: bool = False

    def __post_init__(self) -> None:
        props = {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
                 "connections.max.reauth.ms": str(LIFETIME_MS)}
        self.sasl = SaslListeners({"SASL": "SASL_PLAINTEXT"}, lambda _l, k: props.get(k), CredentialCache(),
                                  clock=self.clock)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        me = self.connections

        class Conn:
            listener_name = "SASL"
            security_protocol = "SASL_PLAINTEXT"
            peer = f"peer-{me}"
        conn = Conn()
        session = self.sasl.session(conn)
        assert session is not None
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if session.admit_frame(size) is not Verdict.PASS:
                    self.closed_by_gate.append(f"{size} bytes in state {session.state.name}")
                    break
                data = await reader.readexactly(size)
                header, body_at = decode_request_header(data)
                key, version = header.api_key, header.api_version
                self.seen.append((me, key))
                if session.gate(key) is not Verdict.PASS:
                    self.closed_by_gate.append(f"{ApiKey(key).name} in state {session.state.name}")
                    break
                body = memoryview(data)[body_at:]
                if key == ApiKey.SASL_HANDSHAKE:
                    hs = session.handshake(request_codec(key, version).decode(body)["mechanism"], version)
                    reply = {"error_code": hs.error, "mechanisms": hs.mechanisms}
                elif key == ApiKey.SASL_AUTHENTICATE:
                    token = bytes(request_codec(key, version).decode(body)["auth_bytes"])
                    if self.refuse_reauth and session.reauthenticating:
                        reply = {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": "refused",
                                 "auth_bytes": b"", "session_lifetime_ms": 0}
                        writer.writelines(frame(encode_response_header(header.correlation_id, key, version),
                                                response_codec(key, version).encode(reply)))
                        break
                    r = session.authenticate(token, version)
                    reply = {"error_code": r.error, "error_message": r.message, "auth_bytes": r.token,
                             "session_lifetime_ms": r.session_lifetime_ms}
                else:
                    if key == ApiKey.FETCH:
                        await asyncio.sleep(0.2)
                    writer.writelines(frame(encode_response_header(header.correlation_id, key, 0), b"ok"))
                    continue
                writer.writelines(frame(encode_response_header(header.correlation_id, key, version),
                                        response_codec(key, version).encode(reply)))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def keys(self, conn: int | None = None) -> list[int]:
        return [k for c, k in self.seen if conn is None or c == conn]


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, int]]:
    p = Peer(Clock())
    server = await asyncio.start_server(p.serve, "127.0.0.1", 0)
    yield p, server.sockets[0].getsockname()[1]
    server.close()


H, A, F, L = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.FETCH, ApiKey.LIST_OFFSETS


async def test_reauthenticates_between_requests_on_the_same_socket(peer: tuple[Peer, int]) -> None:
    p, port = peer
    clock = p.clock
    async with await KafkaConnection.open("127.0.0.1", port, security=ALICE, clock=clock) as conn:
        assert p.keys() == [H, A]
        due = conn._reauth.due_at
        assert due is not None and clock.now + 8.5 <= due < clock.now + 9.5
        clock.now = due - 0.01
        assert [bytes(r or b"") for r in await asyncio.gather(*(conn.send_raw(L, 1, b"") for _ in range(3)))] \
            == [b"ok"] * 3
        assert p.keys() == [H, A, L, L, L]
        # A Fetch in flight when it falls due; five requests sent together then wait for the
        # exchange, which goes out behind the Fetch.
        fetch = asyncio.ensure_future(conn.send_raw(F, 3, b""))
        await asyncio.sleep(0.05)
        clock.now = due + 0.01
        answers = await asyncio.gather(fetch, *(conn.send_raw(L, 1, b"") for _ in range(5)))
        assert [bytes(r or b"") for r in answers] == [b"ok"] * 6
        assert p.keys() == [H, A, L, L, L, F, H, A, L, L, L, L, L]
        assert conn._reauth.due_at is not None and conn._reauth.due_at >= clock.now + 8.5
        # Idle past the session's end (the broker would close it at any request but a
        # SaslHandshake): the next request re-authenticates first and is served.
        clock.now += LIFETIME_MS / 1000 + 5
        assert bytes(await conn.send_raw(L, 1, b"") or b"") == b"ok"
        assert p.keys()[-3:] == [H, A, L]
    assert p.connections == 1 and p.closed_by_gate == []
    assert [s.completions for s in p.sasl._sessions.values()] in ([], [3])  # the weak map may have let go


async def test_a_refused_reauthentication_fails_the_waiting_requests_and_closes(peer: tuple[Peer, int]) -> None:
    p, port = peer
    conn = await KafkaConnection.open("127.0.0.1", port, security=ALICE, clock=p.clock)
    try:
        assert conn._reauth.due_at is not None
        p.clock.now = conn._reauth.due_at
        p.refuse_reauth = True
        results = await asyncio.gather(*(conn.send_raw(L, 1, b"") for _ in range(3)), return_exceptions=True)
        assert all(isinstance(r, ConnectionError) for r in results), results
        assert "SASL_AUTHENTICATION_FAILED" in repr(results[0].__cause__ or results[0])
        with pytest.raises(ConnectionError):
            await conn.send_raw(L, 1, b"")
        assert p.keys() == [H, A, H, A]  # nothing else went out
    finally:
        await conn.close()


async def test_a_caller_timing_out_does_not_cut_the_exchange(peer: tuple[Peer, int]) -> None:
    p, port = peer
    async with await KafkaConnection.open("127.0.0.1", port, security=ALICE, clock=p.clock) as conn:
        assert conn._reauth.due_at is not None
        p.clock.now = conn._reauth.due_at
        sender = asyncio.ensure_future(conn.send_raw(L, 1, b""))
        await asyncio.sleep(0)
        sender.cancel()  # cancelled while the exchange it started runs
        with pytest.raises(asyncio.CancelledError):
            await sender
        assert bytes(await conn.send_raw(L, 1, b"") or b"") == b"ok"
        assert p.keys() == [H, A, H, A, L]
    assert p.connections == 1 and p.closed_by_gate == []
