"""`RecordingProxy`: a TCP proxy in front of one broker that keeps every request frame clients send.

Clients learn the broker's address from Metadata, so the broker must advertise the proxy's
port (`advertised.listeners`), or they would reconnect around it after bootstrap. Requests
are cut from the client-to-broker stream by their size prefix; responses pass untouched.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

from tests.support.ports import free_port

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")


@dataclass(frozen=True)
class Recorded:
    api_key: int
    api_version: int
    frame: bytes  # header and body, without the size prefix
    client: str   # the label the proxy had when the connection was accepted


class RecordingProxy:
    """Listens on 127.0.0.1:`port` (chosen before the broker starts, so it can advertise it)."""

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self.client = "unknown"  # set before each client runs: which client a connection belongs to
        self.recorded: list[Recorded] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._requests(reader, up_writer, self.client), self._pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # the proxy is stopping; this connection's task ends here

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str) -> None:
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                body = await reader.readexactly(size)
                if size >= 4:
                    key, version = _KEY_VERSION.unpack_from(body)
                    self.recorded.append(Recorded(key, version, body, client))
                writer.write(head + body)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
