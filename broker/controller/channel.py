"""The controller's connections to brokers: one ordered queue and sender task per broker.

Kafka's ControllerChannelManager keeps one send thread per broker so that requests to a
broker arrive in the order the controller decided them; a failed send is retried on a
fresh connection until it succeeds or the broker leaves the cluster.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog

from broker.zk.layout import BrokerInfo
from fetcher.connection import KafkaConnection
from fetcher.security import PLAINTEXT, ClientSecurity

log = structlog.get_logger()

REQUEST_TIMEOUT_S = 30.0


@dataclass
class _Request:
    api_key: int
    version: int
    body: dict[str, Any]
    done: asyncio.Future[dict[str, Any] | None]
    timeout: float


class _BrokerSender:
    def __init__(self, info: BrokerInfo, controller_id: int, security: ClientSecurity = PLAINTEXT) -> None:
        self.info = info
        self.security = security
        self.controller_id = controller_id
        self.queue: asyncio.Queue[_Request] = asyncio.Queue()
        self.task = asyncio.create_task(self._run())
        self.conn: KafkaConnection | None = None

    async def _run(self) -> None:
        while True:
            req = await self.queue.get()
            backoff = 0.1
            while True:
                try:
                    if self.conn is None:
                        self.conn = await KafkaConnection.open(self.info.host, self.info.port,
                                                               client_id=f"controller-{self.controller_id}",
                                                               timeout=5, security=self.security)
                    resp = await self.conn.request(req.api_key, req.version, req.body, timeout=req.timeout)
                    if not req.done.done():
                        req.done.set_result(resp)
                    break
                except asyncio.CancelledError:
                    if not req.done.done():
                        req.done.set_result(None)
                    raise
                except Exception as e:
                    log.info("controller.send_retry", to_broker=self.info.broker_id, api_key=req.api_key,
                             error=type(e).__name__)
                    if self.conn is not None:
                        await self.conn.close()
                        self.conn = None
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass
        while not self.queue.empty():
            req = self.queue.get_nowait()
            if not req.done.done():
                req.done.set_result(None)
        if self.conn is not None:
            await self.conn.close()


class ControllerChannel:
    def __init__(self, controller_id: int, security: ClientSecurity = PLAINTEXT) -> None:
        self.controller_id = controller_id
        self.security = security  # for the brokers' inter-broker listener
        self.senders: dict[int, _BrokerSender] = {}

    def set_brokers(self, brokers: dict[int, BrokerInfo]) -> list[asyncio.Task[None]]:
        closing = []
        for bid in list(self.senders):
            if bid not in brokers or self.senders[bid].info != brokers[bid]:
                closing.append(asyncio.create_task(self.senders.pop(bid).close()))
        for bid, info in brokers.items():
            if bid not in self.senders:
                self.senders[bid] = _BrokerSender(info, self.controller_id, self.security)
        return closing

    def send(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
             timeout: float = REQUEST_TIMEOUT_S) -> asyncio.Future[dict[str, Any] | None]:
        """Queue a request; `timeout` before it is retried on a new connection (Kafka's
        controller.socket.timeout.ms, 30 s; longer for a LeaderAndIsr of thousands of partitions,
        which a loaded broker may take longer than that to apply: a retry would apply it again)."""
        fut: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        sender = self.senders.get(broker_id)
        if sender is None:
            fut.set_result(None)
        else:
            sender.queue.put_nowait(_Request(api_key, version, body, fut, timeout))
        return fut

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.senders.values()), return_exceptions=True)
        self.senders.clear()
