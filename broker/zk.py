"""The one door to ZooKeeper: aiozk behind retries, session tracking and self-healing watches.

aiozk has pitfalls this module exists to contain:
- a request in flight when the server dies hangs for the whole session timeout and then raises
  `aiozk.exc.TimeoutError`; every call here runs in bounded attempts and retries idempotently;
- its reconnect back-off grows to 60 s, so a ZooKeeper restart would stall the broker for a
  minute; the cap is lowered (a module constant aiozk reads on each reconnect);
- `DataWatcher(wait_for_create=True)` mutates a class-level list, and its recipes lose watches
  on session expiry; watches here are built on the raw watch callbacks instead;
- `ensure_path` makes container znodes, which ZooKeeper deletes when their last child goes,
  e.g. `/brokers/ids` when the last broker stops; parents are made as plain znodes here.

A connect string may end in a chroot (`host:port,host:port/chroot`), as in Kafka's
`zookeeper.connect`; the chroot is created when missing, as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiozk
import aiozk.session
import structlog
from aiozk import exc as zkexc
from aiozk.protocol import WatchEvent
from aiozk.states import States

log = structlog.get_logger()

# aiozk reads this on every reconnect: 60 s between attempts is far too slow for a broker.
aiozk.session.MAX_FIND_WAIT = 1
# aiozk logs every refused reconnect with a traceback; this module logs state changes itself.
logging.getLogger("aiozk").setLevel(logging.CRITICAL)


class ZkError(Exception):
    pass


class NoNodeError(ZkError):
    pass


class NodeExistsError(ZkError):
    pass


class BadVersionError(ZkError):
    pass


class NotEmptyError(ZkError):
    pass


class ZkUnavailable(ZkError):
    """ZooKeeper did not answer within the retry budget."""


_MAPPED: dict[type[BaseException], type[ZkError]] = {
    zkexc.NoNode: NoNodeError,
    zkexc.NodeExists: NodeExistsError,
    zkexc.BadVersion: BadVersionError,
    zkexc.NotEmpty: NotEmptyError,
}
# Errors after which the same request may simply be sent again.
_TRANSIENT: tuple[type[BaseException], ...] = (
    zkexc.TimeoutError, zkexc.ConnectionLoss, zkexc.SessionLost, zkexc.ConnectError, zkexc.SessionExpired,
    zkexc.OperationTimeout, zkexc.FailedRetry, zkexc.UnfinishedRead, zkexc.NoServersError,
    zkexc.InvalidClientState, asyncio.TimeoutError, ConnectionError, OSError,
)

DataCallback = Callable[[bytes | None], Awaitable[None]]
ChildrenCallback = Callable[[list[str]], Awaitable[None]]
SessionCallback = Callable[[bool], Awaitable[None]]


def split_connect(connect: str) -> tuple[str, str | None]:
    servers, slash, chroot = connect.partition("/")
    chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else None
    return servers, chroot


class Watch:
    """One self-healing watch: re-reads after every event and after every reconnect."""

    def __init__(self, client: ZkClient, path: str, children: bool, callback: Callable[[Any], Awaitable[None]]):
        self.client = client
        self.path = path
        self.children = children
        self.callback = callback
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._raw_path = ""

    def _fire(self, _path: str | None = None) -> None:
        self.wake.set()

    def start(self) -> None:
        self._raw_path = self.client._zk.normalize_path(self.path)
        for ev in (WatchEvent.CREATED, WatchEvent.DELETED, WatchEvent.DATA_CHANGED, WatchEvent.CHILDREN_CHANGED):
            self.client._zk.session.add_watch_callback(ev, self._raw_path, self._fire)
        self._task = asyncio.create_task(self._run())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for ev in (WatchEvent.CREATED, WatchEvent.DELETED, WatchEvent.DATA_CHANGED, WatchEvent.CHILDREN_CHANGED):
            with contextlib.suppress(KeyError):
                self.client._zk.session.remove_watch_callback(ev, self._raw_path, self._fire)
        self.client._watches.discard(self)

    async def _read(self) -> Any:
        zk = self.client._zk
        while True:
            try:
                if self.children:
                    return list(await zk.get_children(self.path, watch=True))
                data, _ = await zk.get(self.path, watch=True)
                return bytes(data) if data is not None else b""
            except zkexc.NoNode:
                # Arm an exists-watch so the creation wakes us; if it appeared meanwhile, read again.
                if await zk.exists(self.path, watch=True):
                    continue
                return [] if self.children else None

    async def _run(self) -> None:
        while True:
            self.wake.clear()
            try:
                value = await self.client._retrying(self._read, f"watch {self.path}")
            except ZkUnavailable:
                await asyncio.sleep(0.5)
                continue
            try:
                await self.callback(value)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("zk.watch_callback_failed", path=self.path)
            await self.wake.wait()


class ZkClient:
    def __init__(self, connect: str, session_timeout_ms: int = 18000, retry_budget_s: float | None = None) -> None:
        self.connect = connect
        self.servers, self.chroot = split_connect(connect)
        self.session_timeout_s = session_timeout_ms / 1000
        # Long enough to ride out a ZooKeeper restart, short enough that a dead ensemble surfaces.
        self.retry_budget_s = retry_budget_s if retry_budget_s is not None else max(30.0, 3 * self.session_timeout_s)
        self._zk = aiozk.ZKClient(self.servers, session_timeout=self.session_timeout_s)
        self._watches: set[Watch] = set()
        self._session_callbacks: list[SessionCallback] = []
        self._monitor: asyncio.Task[None] | None = None
        self._closed = False
        self.session_id: int | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            # Bounded attempts with a fresh aiozk client each: a first connect that fails at the
            # wrong moment can leave aiozk's repair loop dead, and its start() would wait forever.
            attempt = max(0.1, min(10.0, deadline - time.monotonic()))
            try:
                await asyncio.wait_for(self._zk.start(), attempt)
                break
            except (TimeoutError, *_TRANSIENT) as e:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._zk.close(), 2)
                if time.monotonic() >= deadline:
                    raise ZkUnavailable(f"cannot reach ZooKeeper at {self.servers} within {timeout}s") from e
                log.warning("zk.connect_retry", servers=self.servers, error=type(e).__name__)
                self._zk = aiozk.ZKClient(self.servers, session_timeout=self.session_timeout_s)
                await asyncio.sleep(0.2)
        if self.chroot:
            await self._ensure_raw(self.chroot)
            self._zk.chroot = self._zk.normalize_path(self.chroot)
        self.session_id = self._zk.session.session_id
        self._monitor = asyncio.create_task(self._watch_session())
        log.info("zk.connected", servers=self.servers, chroot=self.chroot, session=hex(self.session_id or 0))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w in list(self._watches):
            w.cancel()
        if self._monitor is not None:
            self._monitor.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._zk.close(), 5)

    def on_session(self, callback: SessionCallback) -> None:
        self._session_callbacks.append(callback)

    async def _watch_session(self) -> None:
        state = self._zk.session.state
        while not self._closed:
            await state.wait_for(States.SUSPENDED, States.LOST)
            if self._closed:
                return
            log.warning("zk.disconnected", state=state.current_state)
            await state.wait_for(States.CONNECTED)
            new_id = self._zk.session.session_id
            new_session = new_id != self.session_id
            self.session_id = new_id
            log.info("zk.reconnected", new_session=new_session, session=hex(new_id or 0))
            for cb in list(self._session_callbacks):
                try:
                    await cb(new_session)
                except Exception:
                    log.exception("zk.session_callback_failed")
            # Watches may have been lost (always, on a new session): every one reads afresh.
            for w in list(self._watches):
                w.wake.set()

    # ---- retries ---------------------------------------------------------------------------

    async def _retrying(self, op: Callable[[], Awaitable[Any]], what: str) -> Any:
        deadline = time.monotonic() + self.retry_budget_s
        delay = 0.05
        while True:
            if self._closed:
                raise ZkUnavailable(f"{what}: client closed")
            left = deadline - time.monotonic()
            try:
                # One attempt never waits longer than a session timeout: a request stuck on a dead
                # connection is abandoned and sent again on the next one.
                return await asyncio.wait_for(op(), min(max(left, 0.1), self.session_timeout_s))
            except tuple(_MAPPED) as e:
                raise _MAPPED[type(e)](f"{what}: {type(e).__name__}") from e
            except _TRANSIENT as e:
                if time.monotonic() >= deadline:
                    raise ZkUnavailable(f"{what}: ZooKeeper unavailable ({type(e).__name__})") from e
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    # ---- operations ------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, int]:
        data, stat = await self._retrying(lambda: self._zk.get(path), f"get {path}")
        return (bytes(data) if data is not None else b""), stat.version

    async def get_children(self, path: str) -> list[str]:
        return list(await self._retrying(lambda: self._zk.get_children(path), f"get_children {path}"))

    async def exists(self, path: str) -> bool:
        return bool(await self._retrying(lambda: self._zk.exists(path), f"exists {path}"))

    async def ctime_ms(self, path: str) -> int:
        _, stat = await self._retrying(lambda: self._zk.get(path), f"stat {path}")
        return int(stat.created)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False,
                     make_parents: bool = False) -> str:
        attempts = 0

        async def once() -> str:
            nonlocal attempts
            attempts += 1
            try:
                return await self._zk.create(path, data, ephemeral=ephemeral, sequential=sequential)
            except zkexc.NodeExists:
                # A retried create whose first attempt did reach the server: the node is ours
                # when it is an ephemeral of this very session.
                if attempts > 1 and ephemeral and not sequential:
                    _, stat = await self._zk.get(path)
                    if stat.ephemeral_owner == self._zk.session.session_id:
                        return path
                raise
            except zkexc.NoNode:
                if not make_parents:
                    raise
                parent = path.rsplit("/", 1)[0]
                if parent:
                    await self._ensure(parent)
                return await self._zk.create(path, data, ephemeral=ephemeral, sequential=sequential)

        return await self._retrying(once, f"create {path}")

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        stat = await self._retrying(lambda: self._zk.set(path, data, version), f"set {path}")
        return int(stat.version)

    async def delete(self, path: str, version: int = -1) -> None:
        from aiozk import protocol

        raw = self._zk.normalize_path(path)
        await self._retrying(lambda: self._zk.send(protocol.DeleteRequest(path=raw, version=version)),
                             f"delete {path}")

    async def ensure_path(self, path: str) -> None:
        await self._retrying(lambda: self._ensure(path), f"ensure_path {path}")

    async def _ensure(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            with contextlib.suppress(zkexc.NodeExists):
                await self._zk.create("/" + "/".join(parts[:i]), b"")

    async def _ensure_raw(self, raw_path: str) -> None:
        """Creates a path outside the chroot (the chroot itself), before the chroot is applied."""
        saved, self._zk.chroot = self._zk.chroot, None
        try:
            await self._retrying(lambda: self._ensure(raw_path), f"ensure chroot {raw_path}")
        finally:
            self._zk.chroot = saved

    async def delete_recursive(self, path: str) -> None:
        try:
            children = await self.get_children(path)
        except NoNodeError:
            return
        for child in children:
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        with contextlib.suppress(NoNodeError):
            await self.delete(path)

    # ---- watches ---------------------------------------------------------------------------

    async def watch_data(self, path: str, callback: DataCallback) -> Watch:
        return self._add_watch(path, False, callback)

    async def watch_children(self, path: str, callback: ChildrenCallback) -> Watch:
        return self._add_watch(path, True, callback)

    def _add_watch(self, path: str, children: bool, callback: Callable[[Any], Awaitable[None]]) -> Watch:
        w = Watch(self, path, children, callback)
        self._watches.add(w)
        w.start()
        return w
