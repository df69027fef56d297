"""ZooKeeper for tests: a started client on a real server (the `zk_server` fixtures start Debian's zookeeper).

`TcpProxy` stands between a client and a server to cut the network without touching either,
e.g. to keep a client away until ZooKeeper has expired its session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from broker.zk.client import ZkClient
from broker.zk.server import ZooKeeperServer


@contextlib.asynccontextmanager
async def zk_connect(server: ZooKeeperServer | str, session_timeout_ms: int = 4000,
                     chroot: str = "") -> AsyncIterator[ZkClient]:
    """A started ZkClient on `server` (or a connect string), closed on exit."""
    connect = server if isinstance(server, str) else server.connect_string
    client = ZkClient(connect + chroot, session_timeout_ms)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target; `block()` cuts every connection and refuses new ones."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.blocked = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.block()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def block(self) -> None:
        self.blocked = True
        for w in list(self._writers):
            w.close()
        self._writers.clear()

    def unblock(self) -> None:
        self.blocked = False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.blocked:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
