"""`LossyProxy`: a TCP proxy in front of one broker that can lose the answers to Produce requests.

When armed with `lose_produce_answers(n)`, the next `n` Produce responses coming back from the
broker are swallowed and that client connection is closed: the broker has appended the
records, the client never learns it and sends the request again, which is exactly the
retry an idempotent producer must not turn into a duplicate. The broker must advertise the
proxy's port (`advertised.listeners`) so that clients stay behind it after bootstrap.
It runs its own event loop on a thread, so synchronous tests (Spark) can use it.
"""

from __future__ import annotations

import asyncio
import struct
import threading

from protocol.api_keys import ApiKey
from tests.support.ports import free_port

_SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_CORRELATION = struct.Struct(">i")


class LossyProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.produce_requests = 0  # Produce requests seen, all connections
        self.lost = 0  # Produce answers swallowed so far
        self._to_lose = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lossy-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def lose_produce_answers(self, n: int) -> None:
        with self._lock:
            self._to_lose = n

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        self._writers.clear()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        produce_ids: set[int] = set()
        try:
            await asyncio.gather(self._requests(reader, up_writer, produce_ids),
                                 self._responses(up_reader, writer, up_writer, produce_ids))
        except asyncio.CancelledError:
            pass  # the proxy is stopping

    async def _requests(self, reader: asyncio.StreamReader, up: asyncio.StreamWriter, produce_ids: set[int]) -> None:
        try:
            while True:
                head = await reader.readexactly(4)
                body = await reader.readexactly(_SIZE.unpack(head)[0])
                key, _version, correlation = _REQUEST_HEAD.unpack_from(body)
                if key == ApiKey.PRODUCE:
                    produce_ids.add(correlation)
                    with self._lock:
                        self.produce_requests += 1
                up.write(head + body)
                await up.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            up.close()

    async def _responses(self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         up: asyncio.StreamWriter, produce_ids: set[int]) -> None:
        try:
            while True:
                head = await up_reader.readexactly(4)
                body = await up_reader.readexactly(_SIZE.unpack(head)[0])
                (correlation,) = _CORRELATION.unpack_from(body)
                if correlation in produce_ids:
                    produce_ids.discard(correlation)
                    with self._lock:
                        lose = self._to_lose > 0
                        if lose:
                            self._to_lose -= 1
                            self.lost += 1
                    if lose:  # the broker has answered, so it has appended: the client never hears of it
                        break
                writer.write(head + body)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            up.close()
