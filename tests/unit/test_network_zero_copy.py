"""broker.network: file ranges sent with sendfile, and request frames received once.

A real listener on a real socket (uvloop, as the broker runs), with a scripted dispatcher in
place of the broker's. Responses carry ranges of a real file (FileSlice, as Fetch hands them
out); what the client receives is compared byte for byte with the file. Which way the bytes
went is read from network.SENDFILE_BYTES (sent by sendfile, read with pread after a partial
send).
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from broker import network
from broker.log import FileSlice
from broker.log.open_files import OpenFiles
from broker.network import READ_AHEAD, Connection, ConnectionLimits, Listener
from broker.security.ssl_listener import ListenerTls

MAX_FRAME = 1 << 20
FILE_BYTES = 24 << 20


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("zero-copy") / "00000000000000000000.log"
    path.write_bytes(os.urandom(FILE_BYTES))
    return path


class Script:
    """Each frame is `kind:a:b`. `file:pos:len` answers with that range of the file (a head of
    bytes, the range, a tail of bytes); `wait:pos:len` does the same after a short wait (so it
    is answered after the requests behind it are read); `echo:...` answers with the frame."""

    def __init__(self, path: Path) -> None:
        self.file = OpenFiles().open(path, os.O_RDONLY)
        self.frames: list[bytes] = []

    async def handle(self, conn: Connection, frame: bytes) -> bool:
        self.frames.append(bytes(frame))
        kind, _, rest = bytes(frame).partition(b":")
        if kind == b"echo":
            conn.write([struct.pack(">i", len(frame)), bytes(frame)])
            return True
        pos, length = (int(x) for x in rest.split(b":"))
        if kind == b"wait":
            conn.request_processed()
            await asyncio.sleep(0.01)
        head, tail = b"H" * 7, b"T" * 5
        conn.write([struct.pack(">i", len(head) + length + len(tail)), head,
                    FileSlice(self.file, pos, length), tail])
        return True


@pytest.fixture
async def served(data_file: Path) -> AsyncIterator[tuple[Listener, Script]]:
    script = Script(data_file)
    listener = Listener(script, "127.0.0.1", 0, MAX_FRAME, ConnectionLimits())  # type: ignore[arg-type]
    await listener.start()
    try:
        yield listener, script
    finally:
        await listener.stop()


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 20))
    return await asyncio.wait_for(reader.readexactly(size), 20)


class SlowClient:
    """A blocking socket with a small receive buffer that reads only when told: the broker's
    socket fills, and what is left of a range waits for it."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        self.sock.connect(("127.0.0.1", port))

    async def send(self, data: bytes) -> None:
        await asyncio.to_thread(self.sock.sendall, data)

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(buf), n)
            buf += chunk
        return bytes(buf)

    async def answer(self) -> bytes:
        (size,) = struct.unpack(">i", await asyncio.to_thread(self._exactly, 4))
        return await asyncio.to_thread(self._exactly, size)

    async def rest(self) -> bytes:
        chunks = []
        while chunk := await asyncio.to_thread(self.sock.recv, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def expected(path: Path, pos: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(pos)
        return b"H" * 7 + f.read(length) + b"T" * 5


async def test_a_file_range_goes_by_sendfile_and_arrives_intact(served: tuple[Listener, Script], data_file: Path) -> None:
    listener, _ = served
    before = list(network.SENDFILE_BYTES)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(frame(b"file:1000:100000"))
    assert await read_answer(reader) == expected(data_file, 1000, 100_000)
    assert network.SENDFILE_BYTES[0] > before[0]
    writer.close()


async def test_a_partial_sendfile_is_finished_through_the_transport(served: tuple[Listener, Script],
                                                                     data_file: Path) -> None:
    # The client reads nothing until the whole response has been handed over: the socket takes
    # a few MiB, sendfile stops short, and the rest is read and queued in the transport.
    listener, _ = served
    before = list(network.SENDFILE_BYTES)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port, limit=64 << 20)
    length = 20 << 20
    writer.write(frame(b"file:3:%d" % length) + frame(b"echo:after"))
    await asyncio.sleep(0.3)
    assert await read_answer(reader) == expected(data_file, 3, length)
    assert await read_answer(reader) == b"echo:after"
    sent, copied = network.SENDFILE_BYTES[0] - before[0], network.SENDFILE_BYTES[1] - before[1]
    assert sent > 0 and copied > 0 and sent + copied == length
    writer.close()


async def test_file_ranges_under_pipelining_come_back_in_order(served: tuple[Listener, Script],
                                                                data_file: Path) -> None:
    # Up to 16 in flight; waiting requests are answered after the ones behind them are read
    # (their ranges read as they are answered), others at once (by sendfile when nothing is queued).
    listener, _ = served
    asks = []
    for i in range(60):
        kind = (b"wait", b"file", b"echo")[i % 3]
        asks.append(b"echo:%d" % i if kind == b"echo" else b"%s:%d:%d" % (kind, i * 50_001, 40_000 + i * 997))
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port, limit=64 << 20)
    writer.write(b"".join(frame(a) for a in asks))
    for ask in asks:
        kind, _, rest = ask.partition(b":")
        if kind == b"echo":
            assert await read_answer(reader) == ask
        else:
            pos, length = (int(x) for x in rest.split(b":"))
            assert await read_answer(reader) == expected(data_file, pos, length)
    writer.close()


async def test_a_client_closing_mid_response_costs_only_its_connection(served: tuple[Listener, Script],
                                                                       data_file: Path) -> None:
    listener, _ = served
    _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(frame(b"file:0:%d" % (20 << 20)))
    await asyncio.sleep(0.05)
    writer.transport.abort()
    for _ in range(300):
        if not listener.connections:
            break
        await asyncio.sleep(0.01)
    assert not listener.connections
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(frame(b"file:5:70000"))
    assert await read_answer(reader) == expected(data_file, 5, 70_000)
    writer.close()


async def test_a_range_past_the_end_of_its_file_closes_only_that_connection(served: tuple[Listener, Script],
                                                                            data_file: Path) -> None:
    # A file cut back under a response whose size is already on the wire (Kafka's FileRecords
    # "truncated during write"): that connection is closed, nothing else is disturbed.
    listener, _ = served
    other_reader, other_writer = await asyncio.open_connection("127.0.0.1", listener.port)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(frame(b"file:%d:100000" % (FILE_BYTES - 50_000)))
    with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
        while True:
            await read_answer(reader)
    other_writer.write(frame(b"file:9:50000"))
    assert await read_answer(other_reader) == expected(data_file, 9, 50_000)
    other_writer.close()
    writer.close()


async def test_answers_behind_a_range_the_socket_has_not_taken_wait_their_turn(
        served: tuple[Listener, Script], data_file: Path) -> None:
    # The client reads nothing for a while: the first range waits for the socket (sendfile
    # resumes as it drains), and every answer after it, bytes or ranges, queues behind it.
    listener, _ = served
    asks = []
    for i in range(12):
        asks.append(b"echo:%d" % i if i % 2 else b"file:%d:%d" % (i * 1_000_003, (4 << 20) + i))
    client = SlowClient(listener.port)
    before = network.SENDFILE_BYTES[0]
    await client.send(b"".join(frame(a) for a in asks))
    await asyncio.sleep(0.3)
    for ask in asks:
        kind, _, rest = ask.partition(b":")
        if kind == b"echo":
            assert await client.answer() == ask
        else:
            pos, length = (int(x) for x in rest.split(b":"))
            assert await client.answer() == expected(data_file, pos, length)
    assert network.SENDFILE_BYTES[0] > before
    client.close()


async def test_a_client_that_half_closes_still_gets_the_whole_answer(served: tuple[Listener, Script],
                                                                     data_file: Path) -> None:
    # Reading ends at its EOF while the range waits for the socket: what is left goes through
    # the transport, which sends it before it closes. (An EOF while the request still runs is
    # the client going away: Connection.peer_went.)
    listener, _ = served
    client = SlowClient(listener.port)
    await client.send(frame(b"file:77:%d" % (12 << 20)))
    head = await asyncio.to_thread(client._exactly, 4)
    client.sock.shutdown(socket.SHUT_WR)
    await asyncio.sleep(0.3)
    assert head + await client.rest() == frame(expected(data_file, 77, 12 << 20))
    client.close()


async def test_a_file_deleted_under_a_waiting_range_is_still_sent(tmp_path: Path) -> None:
    # Retention renames and later unlinks a segment; the range holds its descriptor.
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(os.urandom(16 << 20))
    want = expected(path, 5, 15 << 20)
    script = Script(path)
    listener = Listener(script, "127.0.0.1", 0, MAX_FRAME)  # type: ignore[arg-type]
    await listener.start()
    try:
        client = SlowClient(listener.port)
        await client.send(frame(b"file:5:%d" % (15 << 20)))
        await asyncio.sleep(0.3)
        path.unlink()
        assert await client.answer() == want
        client.close()
    finally:
        await listener.stop()


async def test_a_file_cut_back_under_a_waiting_range_closes_only_that_connection(tmp_path: Path) -> None:
    # A follower truncating its log under a response whose size is on the wire already.
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(os.urandom(16 << 20))
    script = Script(path)
    listener = Listener(script, "127.0.0.1", 0, MAX_FRAME)  # type: ignore[arg-type]
    await listener.start()
    try:
        client = SlowClient(listener.port)
        other_reader, other_writer = await asyncio.open_connection("127.0.0.1", listener.port)
        await client.send(frame(b"file:0:%d" % (15 << 20)))
        await asyncio.sleep(0.3)
        os.truncate(path, 1 << 20)
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await client.answer()
        other_writer.write(frame(b"file:10:40000"))
        assert await read_answer(other_reader) == expected(path, 10, 40_000)
        client.close()
        other_writer.close()
    finally:
        await listener.stop()


# ---- request frames -----------------------------------------------------------------------


async def test_a_frame_split_over_many_segments_is_read_whole(served: tuple[Listener, Script]) -> None:
    listener, script = served
    body = b"echo:" + os.urandom(300_000)
    sock = socket.create_connection(("127.0.0.1", listener.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = frame(body) + frame(b"echo:next")
    loop = asyncio.get_running_loop()
    # 1-byte pieces across the size prefix, then uneven pieces, each its own send (and segment).
    cuts = [1, 2, 3, 4, 5, 9] + list(range(100, len(data), 7_919)) + [len(data)]
    at = 0
    for cut in cuts:
        await loop.run_in_executor(None, sock.sendall, data[at:cut])
        at = cut
        await asyncio.sleep(0.001)
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
    assert await read_answer(reader) == body
    assert await read_answer(reader) == b"echo:next"
    assert script.frames[-2:] == [body, b"echo:next"]
    writer.close()


@pytest.mark.parametrize("extra", [0, 1])
async def test_a_frame_of_exactly_the_limit_is_read_and_one_byte_over_is_refused(
        served: tuple[Listener, Script], extra: int) -> None:
    listener, script = served
    body = b"echo:" + b"x" * (MAX_FRAME - 5 + extra)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port, limit=4 << 20)
    writer.write(frame(body))
    if extra:
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await read_answer(reader)
        assert script.frames == []  # refused on its size, never dispatched
    else:
        assert await read_answer(reader) == body
    writer.close()


async def test_frames_beyond_the_read_ahead_and_within_it_mixed(served: tuple[Listener, Script]) -> None:
    # Small frames arrive several to a read; large ones are received into their own buffer
    # after the part that was read ahead.
    listener, _ = served
    sizes = [10, READ_AHEAD - 9, 3, READ_AHEAD * 5 + 1, 1, 2, READ_AHEAD, 17] * 3
    bodies = [b"echo:" + os.urandom(n) for n in sizes]
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port, limit=4 << 20)
    writer.write(b"".join(frame(b) for b in bodies))
    for body in bodies:
        assert await read_answer(reader) == body
    writer.close()


# ---- TLS: the same reader under an SSL transport, and no sendfile -------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-keyout", str(key), "-out", str(cert), "-days", "1"], check=True, capture_output=True)
    yield cert, key


async def test_over_tls_the_reader_works_and_file_ranges_are_read_not_sendfiled(
        data_file: Path, tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    script = Script(data_file)
    # An SSL listener as the broker builds one: the loop's TLS protocol in front of the reader.
    listener = Listener(script, "127.0.0.1", 0, MAX_FRAME, name="SSL", security_protocol="SSL",  # type: ignore[arg-type]
                        tls=ListenerTls(server_ctx, ()))
    await listener.start()
    port = listener.port
    try:
        before = list(network.SENDFILE_BYTES)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                       server_hostname="localhost", limit=4 << 20)
        big = b"echo:" + os.urandom(READ_AHEAD * 3)
        writer.write(frame(b"file:11:200000") + frame(big) + frame(b"echo:small"))
        assert await read_answer(reader) == expected(data_file, 11, 200_000)
        assert await read_answer(reader) == big
        assert await read_answer(reader) == b"echo:small"
        assert network.SENDFILE_BYTES == before
        assert [(c.sends_files, c.security_protocol) for c in listener.connections] == [(False, "SSL")]
        writer.close()
    finally:
        await listener.stop()
