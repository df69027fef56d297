"""The one door to ZooKeeper: aiozk behind retries, session tracking and self-healing watches.

aiozk has pitfalls this module exists to contain:
- a request in flight when the server dies hangs (aiozk's read loop ends silently and only the
  heartbeat, up to a session timeout later, notices); here the end of the read loop suspends the
  session at once, and every call runs in bounded attempts, retried idempotently;
- its probe of a server before connecting has no time limit, so a frozen server would stall
  reconnecting for as long as it stays frozen; the probe is bounded (aiozk's Connection class is
  replaced in its session module by a subclass);
- its reconnect back-off grows to 60 s, so a ZooKeeper restart would stall the broker for a
  minute; the cap is lowered (a module constant aiozk reads on each reconnect);
- `DataWatcher(wait_for_create=True)` mutates a class-level list, and its recipes lose watches
  on session expiry; watches here are built on the raw watch callbacks instead and re-armed by a
  fresh read after every reconnect, so aiozk's own SetWatches replay is switched off (it runs
  inside aiozk's repair loop, and a connection lost during it would wedge that loop for good);
- aiozk retries a request by itself after a connection loss, so a create, set or delete may
  have been applied once already when it reports NodeExists, BadVersion or NoNode; those
  answers are checked against the znode when a disconnect happened during the call;
- `ensure_path` makes container znodes, which ZooKeeper deletes when their last child goes,
  e.g. `/brokers/ids` when the last broker stops; parents are made as plain znodes here.

With credentials (broker/zk/jaas.py) every connection, the first and each reconnection, sends
`addauth digest user:password` before any other request: ZooKeeper keeps authentication per
connection, not per session, so a resumed session on a new connection would otherwise act
unauthenticated. The auth packet is written synchronously inside the transition to CONNECTED,
before any waiting request is woken, and ZooKeeper handles it before reading the next packet.
With `secure_acls` (zookeeper.set.acl) every znode created here, parents and the chroot included,
gets broker/zk/znode_acls.py's ACL for its path (Kafka's ZkData.defaultAcls). Znodes that exist
already keep theirs (`minibroker zookeeper-security-migration` changes them, as Kafka's tool).

A connect string may end in a chroot (`host:port,host:port/chroot`), as in Kafka's
`zookeeper.connect`; the chroot is created when missing, as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiozk
import aiozk.connection
import aiozk.session
import structlog
from aiozk import exc as zkexc
from aiozk import protocol
from aiozk.protocol import WatchEvent
from aiozk.protocol.acl import ACL, ID
from aiozk.states import States

from broker.zk.jaas import ZkCredentials
from broker.zk.znode_acls import ZnodeAcl, default_acls

log = structlog.get_logger()
_T = TypeVar("_T")

# aiozk reads this on every reconnect: 60 s between attempts is far too slow for a broker, and
# a server that is restarting refuses connections only briefly.
aiozk.session.MAX_FIND_WAIT = 0.5


class _BoundedConnection(aiozk.connection.Connection):  # type: ignore[misc]  # aiozk has no type hints: Any
    """aiozk probes a server with `srvr` and reads the answer with no time limit: one frozen
    server (a stopped JVM still accepts TCP) would hold the reconnect loop until it thaws,
    never trying the others."""

    async def _make_handshake(self) -> None:
        await asyncio.wait_for(super()._make_handshake(), self.read_timeout)

    async def _read(self, size: int = -1) -> bytes:
        """A response's header and body, each read in one bounded `readexactly`. aiozk's own
        wraps every read in `asyncio.wait_for` (a task and a timer each, two a response): most
        of the client's CPU per request, seconds when the controller reads 10,000 states."""
        if size < 0:
            return bytes(await super()._read(size))
        try:
            async with asyncio.timeout(self.read_timeout):
                data: bytes = await self.reader.readexactly(size)  # an asyncio.StreamReader (aiozk untyped)
                return data
        except (TimeoutError, asyncio.IncompleteReadError):
            raise zkexc.UnfinishedRead from None


aiozk.session.Connection = _BoundedConnection
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


class FencedError(ZkError):
    """A write guarded by another znode's version (`set_fenced`) found that znode changed."""


class NoAuthError(ZkError):
    """ZooKeeper refused the operation for this client's identity (NoAuth, InvalidACL, AuthFailed)."""


class ZkUnavailable(ZkError):
    """ZooKeeper did not answer within the retry budget."""


_MAPPED: dict[type[BaseException], type[ZkError]] = {
    zkexc.NoNode: NoNodeError,
    zkexc.NodeExists: NodeExistsError,
    zkexc.BadVersion: BadVersionError,
    zkexc.NotEmpty: NotEmptyError,
    zkexc.NoAuth: NoAuthError,
    zkexc.InvalidACL: NoAuthError,
    zkexc.AuthFailed: NoAuthError,
}
# Errors after which the same request may simply be sent again.
_TRANSIENT: tuple[type[BaseException], ...] = (
    zkexc.TimeoutError, zkexc.ConnectionLoss, zkexc.SessionLost, zkexc.ConnectError, zkexc.SessionExpired,
    zkexc.OperationTimeout, zkexc.FailedRetry, zkexc.UnfinishedRead, zkexc.NoServersError,
    zkexc.InvalidClientState, zkexc.SessionMoved, asyncio.TimeoutError, ConnectionError, OSError,
)
# What a failed start() attempt may raise (TimeoutError: the attempt's own time limit).
_START_FAILURES: tuple[type[BaseException], ...] = (TimeoutError, *_TRANSIENT)
_WATCH_EVENTS = (WatchEvent.CREATED, WatchEvent.DELETED, WatchEvent.DATA_CHANGED, WatchEvent.CHILDREN_CHANGED)
_UP = (States.CONNECTED, States.READ_ONLY)

DataCallback = Callable[[bytes | None], Awaitable[None]]
ChildrenCallback = Callable[[list[str]], Awaitable[None]]
SessionCallback = Callable[[bool], Awaitable[None]]
ExpiryCallback = Callable[[], None]


def split_connect(connect: str) -> tuple[str, str | None]:
    servers, slash, path = connect.partition("/")
    chroot = "/" + path.strip("/") if slash and path.strip("/") else None
    return servers, chroot


class _NoStatCache(dict):  # type: ignore[type-arg]
    """aiozk caches the stat of every path it ever touched and never forgets; nothing here uses it."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


class _WatchTable(dict):  # type: ignore[type-arg]
    """aiozk's table is a defaultdict, so each event for an unwatched path would add an entry forever."""

    def __missing__(self, key: Any) -> frozenset[Any]:
        return frozenset()


async def _no_watch_replay() -> None:
    return None


class Watch:
    """One self-healing watch: re-reads after every event and after every reconnect."""

    def __init__(self, client: ZkClient, path: str, children: bool, callback: Callable[[Any], Awaitable[None]]):
        self.client = client
        self.path = path
        self.children = children
        self.callback = callback
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._registered: list[tuple[Any, tuple[Any, str]]] = []  # (aiozk's table, (event, raw path))
        self._cancelled = False

    def _fire(self, _path: str | None = None) -> None:
        self.wake.set()

    def register(self, zk: aiozk.ZKClient) -> None:
        """Hooks into one aiozk client's event table (a fresh client after start retries)."""
        raw = self.client.raw_path(self.path)
        for ev in _WATCH_EVENTS:
            zk.session.watch_callbacks.setdefault((ev, raw), set()).add(self._fire)
            self._registered.append((zk.session.watch_callbacks, (ev, raw)))

    def start(self) -> None:
        self.register(self.client._zk)
        self._task = asyncio.create_task(self._run(), name=f"zk-watch {self.path}")

    def cancel(self) -> None:
        # Should a cancellation be swallowed on its way (3.11's wait_for does, when it arrives as
        # the awaited read completes), the flag and the wake end the task at its next turn.
        self._cancelled = True
        self.wake.set()
        if self._task is not None:
            self._task.cancel()
        for table, key in self._registered:
            callbacks = table.get(key)
            if callbacks is not None:
                callbacks.discard(self._fire)
                if not callbacks:
                    table.pop(key, None)
        self._registered.clear()
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
        while not self._cancelled:
            # Cleared before the read: an event arriving during the read or the callback sets it
            # again, so the loop reads once more and no change is lost.
            self.wake.clear()
            try:
                value = await self.client._retrying(self._read, f"watch {self.path}")
            except ZkUnavailable:
                await asyncio.sleep(0.5)
                continue
            except ZkError:
                log.exception("zk.watch_read_failed", path=self.path)
                await asyncio.sleep(0.5)
                continue
            if self._cancelled:
                return
            try:
                await self.callback(value)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("zk.watch_callback_failed", path=self.path)
            await self.wake.wait()


class ZkClient:
    def __init__(self, connect: str, session_timeout_ms: int = 18000, retry_budget_s: float | None = None,
                 credentials: ZkCredentials | None = None, secure_acls: bool = False) -> None:
        """`credentials`: authenticate every connection with the digest scheme. `secure_acls`:
        create znodes with Kafka's secure ACLs (needs credentials: the server expands the `auth`
        scheme to the connection's identities and refuses it on an unauthenticated one)."""
        if secure_acls and credentials is None:
            raise ValueError("secure ZooKeeper ACLs need credentials to authenticate with")
        self.connect = connect
        self.credentials = credentials
        self.secure_acls = secure_acls
        self._acl_cache: dict[tuple[ZnodeAcl, ...], list[Any]] = {}
        # The connection the auth packet went out on (one per connection, not per transition).
        self._authed_conn: Any = None
        self.servers, self.chroot = split_connect(connect)
        self.session_timeout_s = session_timeout_ms / 1000
        # Long enough to ride out a ZooKeeper restart, short enough that a dead ensemble surfaces.
        self.retry_budget_s = retry_budget_s if retry_budget_s is not None else max(30.0, 3 * self.session_timeout_s)
        self._zk = self._new_aiozk()
        self._watches: set[Watch] = set()
        self._session_callbacks: list[SessionCallback] = []
        self._expiry_callbacks: list[ExpiryCallback] = []
        # The session aiozk is connected with, updated synchronously at each (re)connection.
        self._live_session: int | None = None
        self._reconnects: asyncio.Queue[int | None] = asyncio.Queue()
        self._notifier: asyncio.Task[None] | None = None
        self._closed = False
        # Bumped on every disconnect: an operation that saw it change may have been applied by an
        # attempt whose answer was lost.
        self._drops = 0
        self.session_id: int | None = None

    def raw_path(self, path: str) -> str:
        """The absolute znode path, chroot included, as the server names it in watch events."""
        parts = [p for p in f"{self.chroot or ''}/{path}".split("/") if p]
        return "/" + "/".join(parts)

    # ---- aiozk plumbing --------------------------------------------------------------------

    def _new_aiozk(self) -> aiozk.ZKClient:
        zk = aiozk.ZKClient(self.servers, session_timeout=self.session_timeout_s)
        session = zk.session
        zk.stat_cache = _NoStatCache()
        session.watch_callbacks = _WatchTable()
        session.set_existing_watches = _no_watch_replay
        machine = session.state
        original = machine.transition_to

        # aiozk's state futures resolve later and can miss a quick drop-and-reconnect; wrapping
        # the transition sees every change synchronously.
        def transition_to(state: str) -> None:
            original(state)
            self._on_transition(zk, state)

        machine.transition_to = transition_to
        return zk

    def _on_transition(self, zk: aiozk.ZKClient, state: str) -> None:
        if zk is not self._zk or self._closed:
            return
        if state in _UP:
            self._authenticate(zk)
            session_id = zk.session.session_id
            if self._live_session is not None and session_id != self._live_session:
                # Before any request or watch event of the new session: whatever acted on the
                # old one's authority (the controller) must stop now, not when a callback runs.
                for expired in list(self._expiry_callbacks):
                    try:
                        expired()
                    except Exception:
                        log.exception("zk.expiry_callback_failed")
            self._live_session = session_id
            # aiozk starts the connection's read loop right after this transition returns.
            asyncio.get_running_loop().call_soon(self._arm_drop_detector, zk, zk.session.conn)
            if self._notifier is not None:
                self._reconnects.put_nowait(zk.session.session_id)
        else:
            self._drops += 1
            if self._notifier is not None:
                log.warning("zk.disconnected", state=state)

    def _authenticate(self, zk: aiozk.ZKClient) -> None:
        """Sends the auth packet on a new connection, first of all: called inside the transition to
        CONNECTED, before aiozk wakes any request waiting for it (they resume on later loop turns)."""
        conn = zk.session.conn
        if self.credentials is None or conn is None or conn is self._authed_conn:
            return
        self._authed_conn = conn
        answer = conn.send(protocol.AuthRequest(type=0, scheme="digest", auth=self.credentials.digest_auth()))
        answer.add_done_callback(self._auth_answered)

    def _auth_answered(self, answer: asyncio.Future[Any]) -> None:
        if answer.cancelled():
            return
        error = answer.exception()
        # A lost connection fails the packet too; the next connection sends it again.
        if error is not None and not isinstance(error, _TRANSIENT):
            # The user names whose credentials were refused; the password never appears.
            log.error("zk.auth_failed", scheme="digest", user=self.credentials.username if self.credentials else None,
                      error=type(error).__name__)

    def _acls(self, path: str) -> list[Any]:
        """aiozk's ACL list for a znode created at `path` (below the chroot)."""
        chosen = default_acls(path, self.secure_acls)
        acls = self._acl_cache.get(chosen)
        if acls is None:
            acls = [ACL(perms=a.perms, id=ID(scheme=a.scheme, id=a.id)) for a in chosen]
            self._acl_cache[chosen] = acls
        return acls

    def _arm_drop_detector(self, zk: aiozk.ZKClient, conn: Any) -> None:
        task = getattr(conn, "read_loop_task", None)
        if task is None:
            return
        task.add_done_callback(lambda _t: self._connection_dropped(zk, conn))

    def _connection_dropped(self, zk: aiozk.ZKClient, conn: Any) -> None:
        session = zk.session
        if (self._closed or session.closing or zk is not self._zk or session.conn is not conn or conn.closing
                or session.state.current_state not in _UP):
            return
        # Requests on this connection would otherwise wait for an answer that never comes; failed
        # with ConnectError, aiozk sends them again once the repair loop has reconnected.
        conn.abort()
        session.state.transition_to(States.SUSPENDED)

    @staticmethod
    async def _shutdown(zk: aiozk.ZKClient) -> None:
        session = zk.session
        if session.started and session.state.current_state in _UP:
            # Closes the session on the server, so our ephemerals go now, not a timeout later.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(zk.close(), 3)
        # Whatever aiozk left running when the server was unreachable or its close timed out.
        session.closing = True
        for task in (session.repair_loop_task, session.heartbeat_task):
            if task is not None and not task.done():
                task.cancel()
        if session.heartbeat_handle is not None:
            session.heartbeat_handle.cancel()
        conn = session.conn
        if conn is not None:
            conn.closing = True
            with contextlib.suppress(Exception):
                conn.abort()
            if conn.read_loop_task is not None and not conn.read_loop_task.done():
                conn.read_loop_task.cancel()
            if conn.writer is not None:
                conn.writer.close()

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
            except _START_FAILURES as e:
                await self._shutdown(self._zk)
                self._zk = self._new_aiozk()  # also when giving up: a later start() begins afresh
                for w in self._watches:
                    w.register(self._zk)
                if time.monotonic() >= deadline:
                    raise ZkUnavailable(f"cannot reach ZooKeeper at {self.servers} within {timeout}s") from e
                log.warning("zk.connect_retry", servers=self.servers, error=type(e).__name__)
                await asyncio.sleep(0.2)
        if self.chroot:
            await self._ensure_raw(self.chroot)
            self._zk.chroot = self._zk.normalize_path(self.chroot)
        self.session_id = self._zk.session.session_id
        self._notifier = asyncio.create_task(self._notify_reconnects(), name="zk-session")
        log.info("zk.connected", servers=self.servers, chroot=self.chroot, session=hex(self.session_id or 0),
                 auth_user=self.credentials.username if self.credentials else None, secure_acls=self.secure_acls)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w in list(self._watches):
            w.cancel()
        if self._notifier is not None:
            self._notifier.cancel()
        await self._shutdown(self._zk)

    def on_session(self, callback: SessionCallback) -> None:
        self._session_callbacks.append(callback)

    def on_session_expired(self, callback: ExpiryCallback) -> None:
        """`callback()` runs synchronously when a new session replaces an expired one, before
        the new session carries any request, watch event or `on_session` callback (Kafka's
        ZooKeeperClient calls `beforeInitializingSession` the same way: its controller resigns
        there, before the broker registers again)."""
        self._expiry_callbacks.append(callback)

    async def _notify_reconnects(self) -> None:
        while not self._closed:
            session_id = await self._reconnects.get()
            # Several reconnects queued while callbacks ran collapse into one round of callbacks.
            while not self._reconnects.empty():
                session_id = self._reconnects.get_nowait()
            new_session = session_id != self.session_id
            self.session_id = session_id
            log.info("zk.reconnected", new_session=new_session, session=hex(session_id or 0))
            # Watches may have been lost (always, on a new session): every one reads afresh.
            for w in list(self._watches):
                w.wake.set()
            for cb in list(self._session_callbacks):
                try:
                    await cb(new_session)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("zk.session_callback_failed")

    # ---- retries ---------------------------------------------------------------------------

    async def _retrying(self, op: Callable[[], Awaitable[_T]], what: str) -> _T:
        deadline = time.monotonic() + self.retry_budget_s
        delay = 0.05
        while True:
            if self._closed:
                raise ZkUnavailable(f"{what}: client closed")
            left = deadline - time.monotonic()
            try:
                # One attempt never waits longer than a session timeout: a request stuck on a dead
                # connection is abandoned and sent again on the next one. asyncio.timeout, not
                # wait_for: no task each call, and 3.11's wait_for swallows a cancellation of the
                # caller that arrives as the request completes (a stopped controller or watch ran on).
                async with asyncio.timeout(min(max(left, 0.1), self.session_timeout_s)):
                    return await op()
            except tuple(_MAPPED) as e:
                raise _MAPPED[type(e)](f"{what}: {type(e).__name__}") from e
            except _TRANSIENT as e:
                if time.monotonic() >= deadline:
                    raise ZkUnavailable(f"{what}: ZooKeeper unavailable ({type(e).__name__})") from e
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _stat(self, path: str) -> Any:
        response = await self._zk.send(protocol.ExistsRequest(path=self.raw_path(path), watch=False))
        return response.stat

    # ---- operations ------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, int]:
        data, stat = await self._retrying(lambda: self._zk.get(path), f"get {path}")
        return (bytes(data) if data is not None else b""), stat.version

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        """Each znode's data and version (None where there is none), the reads pipelined on the
        connection under one time limit (a few hundred at a time: the limit is a session timeout)."""
        async def once() -> list[tuple[bytes, int] | None]:
            # aiozk's Session.send, minus a coroutine (a task, under gather) per request: the
            # requests go out back to back on the connection and their futures are awaited
            # together. A lost connection fails them all, and the attempt is retried whole.
            session = self._zk.session
            await session.ensure_safe_state()
            conn = session.conn
            if conn is None:
                raise zkexc.ConnectError("", 0)
            futures = []
            for path in paths:
                session.xid = session.xid + 1 if session.xid < 0x7FFFFFFF else 1
                request = protocol.GetDataRequest(path=self._zk.normalize_path(path), watch=False)
                futures.append(conn.send(request, xid=session.xid))
            got = await asyncio.gather(*futures, return_exceptions=True)
            out: list[tuple[bytes, int] | None] = []
            last_zxid = session.last_zxid
            for result in got:
                if isinstance(result, zkexc.NoNode):
                    out.append(None)
                elif isinstance(result, BaseException):
                    raise result
                else:
                    zxid, response = result
                    if zxid is not None and (last_zxid is None or zxid > last_zxid):
                        last_zxid = zxid
                    out.append(((bytes(response.data) if response.data is not None else b""),
                                response.stat.version))
            session.last_zxid = last_zxid
            session.set_heartbeat()
            return out
        return list(await self._retrying(once, f"get {len(paths)} znodes"))

    async def get_children(self, path: str) -> list[str]:
        return list(await self._retrying(lambda: self._zk.get_children(path), f"get_children {path}"))

    async def exists(self, path: str) -> bool:
        return bool(await self._retrying(lambda: self._zk.exists(path), f"exists {path}"))

    async def get_created(self, path: str) -> tuple[bytes, int]:
        """A znode's data and its creation zxid (czxid), from one read.

        The czxid names one incarnation of a znode: an ephemeral created again (a broker's new
        session) gets a higher one. Kafka uses it as the broker epoch (KIP-380).
        """
        data, stat = await self._retrying(lambda: self._zk.get(path), f"get {path}")
        return (bytes(data) if data is not None else b""), int(stat.created_zxid)

    async def czxid(self, path: str) -> int:
        """The creation zxid of a znode (NoNodeError when absent)."""
        stat = await self._retrying(lambda: self._stat(path), f"stat {path}")
        if stat is None:
            raise NoNodeError(f"stat {path}: NoNode")
        return int(stat.created_zxid)

    async def ctime_ms(self, path: str) -> int:
        stat = await self._retrying(lambda: self._stat(path), f"stat {path}")
        return int(stat.created)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False,
                     make_parents: bool = False, guard: tuple[str, int] | None = None) -> str:
        """`guard` (path, zkVersion): the create lands only while that znode is at that version, in
        one multi-op with a check of it, as Kafka's controller creates with a check of
        `/controller_epoch`'s zkVersion; FencedError when it moved (parents made meanwhile by
        `make_parents` are not guarded: empty znodes). Not with `sequential`."""
        # A sequential create cannot be recognised after a lost answer: a retry may leave an
        # extra sequential znode, which every user of them here tolerates.
        assert guard is None or not sequential
        attempts = 0
        drops = self._drops

        async def create_once() -> str:
            if guard is not None:
                txn = self._zk.begin_transaction()
                txn.check_version(*guard)
                txn.create(path, data, acl=self._acls(path), ephemeral=ephemeral)
                check, made = (await self._zk.send(txn.request)).responses
                if isinstance(check, zkexc.BadVersion | zkexc.NoNode):
                    raise FencedError(f"create {path}: {guard[0]} is no longer at version {guard[1]}")
                if isinstance(made, BaseException):
                    raise made  # NodeExists, NoNode: handled below as a plain create's
                return path
            created: str = await self._zk.create(path, data, acl=self._acls(path), ephemeral=ephemeral,
                                                 sequential=sequential)  # the path made (aiozk untyped)
            return created

        async def once() -> str:
            nonlocal attempts
            attempts += 1
            try:
                try:
                    return await create_once()
                except zkexc.NoNode:
                    if not make_parents:
                        raise
                    parent = path.rsplit("/", 1)[0]
                    if parent:
                        await self._ensure(parent)
                    return await create_once()
            except zkexc.NodeExists:
                if not sequential and (attempts > 1 or self._drops != drops) and await self._created_by_us(
                        path, data, ephemeral):
                    return path
                raise

        return await self._retrying(once, f"create {path}")

    async def create_all(self, nodes: list[tuple[str, bytes]], guard: tuple[str, int] | None = None) -> bool:
        """Persistent znodes (path, data) made in one multi-op, in order (a parent before its
        children): True if all were made, False if none was (one existed already, or lacked its
        parent: the caller makes them one by one instead). A lost answer retried finds them made
        and answers False too. One request instead of one a znode (10,000 partitions' states).
        `guard` (path, zkVersion): checked first in the same multi-op (see `create`); FencedError
        when it moved, nothing made."""
        async def once() -> bool:
            txn = self._zk.begin_transaction()
            if guard is not None:
                txn.check_version(*guard)
            for path, data in nodes:
                txn.create(path, data, acl=self._acls(path))
            results = (await self._zk.send(txn.request)).responses
            if guard is not None:
                check, results = results[0], results[1:]
                if isinstance(check, zkexc.BadVersion | zkexc.NoNode):
                    raise FencedError(f"create {len(nodes)} znodes: {guard[0]} is no longer at version {guard[1]}")
            return not any(isinstance(r, BaseException) for r in results)

        return await self._retrying(once, f"create {len(nodes)} znodes")

    async def _created_by_us(self, path: str, data: bytes, ephemeral: bool) -> bool:
        """After a lost answer, tells whether an existing znode is the one our create made."""
        try:
            got, stat = await self._zk.get(path)
        except zkexc.NoNode:
            return False
        if ephemeral:
            return bool(stat.ephemeral_owner == self._zk.session.session_id)
        return stat.ephemeral_owner == 0 and stat.version == 0 and bytes(got or b"") == bytes(data)

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        attempts = 0
        drops = self._drops

        async def once() -> int:
            nonlocal attempts
            attempts += 1
            try:
                stat = await self._zk.set(path, data, version)
                return int(stat.version)
            except zkexc.BadVersion:
                if attempts > 1 or self._drops != drops:
                    # Our conditional write may have landed before its answer was lost.
                    got, stat = await self._zk.get(path)
                    if stat.version == version + 1 and bytes(got or b"") == bytes(data):
                        return int(stat.version)
                raise

        return int(await self._retrying(once, f"set {path}"))

    async def set_fenced(self, path: str, data: bytes, version: int, guard: str, guard_version: int) -> int:
        """A conditional set of `path` that lands only while `guard` is still at `guard_version`:
        one multi-op (check + set), as Kafka's controller writes every state znode with a check of
        `/controller_epoch`'s zkVersion, so that a controller superseded meanwhile writes nothing.
        FencedError when `guard` moved, BadVersionError when `path` did; the new version of `path`."""
        attempts = 0
        drops = self._drops

        async def once() -> int:
            nonlocal attempts
            attempts += 1
            txn = self._zk.begin_transaction()
            txn.check_version(guard, guard_version)
            txn.set_data(path, data, version)
            response = await self._zk.send(txn.request)
            check, written = response.responses
            if isinstance(written, protocol.SetDataResponse):
                return int(written.stat.version)
            if isinstance(check, zkexc.BadVersion | zkexc.NoNode):
                raise FencedError(f"set {path}: {guard} is no longer at version {guard_version}")
            if isinstance(written, zkexc.BadVersion) and (attempts > 1 or self._drops != drops):
                # Our write may have landed before its answer was lost.
                got, stat = await self._zk.get(path)
                if stat.version == version + 1 and bytes(got or b"") == bytes(data):
                    return int(stat.version)
            if isinstance(written, BaseException):
                raise written
            raise ZkError(f"set {path}: unexpected multi answer {response}")

        return int(await self._retrying(once, f"set {path} (fenced by {guard})"))

    async def delete(self, path: str, version: int = -1) -> None:
        attempts = 0
        drops = self._drops
        raw = self.raw_path(path)

        async def once() -> None:
            nonlocal attempts
            attempts += 1
            try:
                # Sent raw: aiozk's delete() would substitute a cached version for -1.
                await self._zk.send(protocol.DeleteRequest(path=raw, version=version))
            except zkexc.NoNode:
                if attempts > 1 or self._drops != drops:
                    return  # gone, quite possibly by our own earlier attempt
                raise

        await self._retrying(once, f"delete {path}")

    async def get_acl(self, path: str) -> tuple[ZnodeAcl, ...]:
        acls = await self._retrying(lambda: self._zk.get_acl(path), f"get_acl {path}")
        return tuple(ZnodeAcl(int(a.perms), str(a.id.scheme), str(a.id.id)) for a in acls)

    async def set_default_acl(self, path: str) -> None:
        """Gives an existing znode the ACL this client would create it with (idempotent)."""
        raw = self.raw_path(path)
        await self._retrying(lambda: self._zk.send(protocol.SetACLRequest(path=raw, acl=self._acls(path), version=-1)),
                             f"set_acl {path}")

    async def ensure_path(self, path: str) -> None:
        await self._retrying(lambda: self._ensure(path), f"ensure_path {path}")

    async def _ensure(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:i])
            with contextlib.suppress(zkexc.NodeExists):
                await self._zk.create(parent, b"", acl=self._acls(parent))

    async def _ensure_raw(self, raw_path: str) -> None:
        """Creates a path outside the chroot (the chroot itself), before the chroot is applied."""
        saved, self._zk.chroot = self._zk.chroot, None
        try:
            await self._retrying(lambda: self._ensure(raw_path), f"ensure chroot {raw_path}")
        finally:
            self._zk.chroot = saved

    async def delete_recursive(self, path: str) -> None:
        while True:
            try:
                children = await self.get_children(path)
            except NoNodeError:
                return
            for child in children:
                await self.delete_recursive(f"{path.rstrip('/')}/{child}")
            try:
                await self.delete(path)
                return
            except NoNodeError:
                return
            except NotEmptyError:
                continue  # a child appeared meanwhile

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
