"""broker.zk.client against a real ZooKeeper, including real server restarts, kills and session expiry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiozk
import pytest

from broker.zk.client import (
    BadVersionError,
    FencedError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ZkClient,
)
from broker.zk.server import ZooKeeperServer
from tests.support.waiting import wait_for
from tests.support.zookeeper import TcpProxy, zk_connect

pytestmark = pytest.mark.integration

CHROOT = "/chroot/test"


@pytest.fixture
async def zk(zk_server: ZooKeeperServer) -> AsyncIterator[ZkClient]:
    async with zk_connect(zk_server, 4000, CHROOT) as c:
        yield c


async def test_crud_versions_and_errors(zk: ZkClient) -> None:
    with pytest.raises(NoNodeError):
        await zk.get("/a")
    with pytest.raises(NoNodeError):
        await zk.create("/a/b", b"x")
    with pytest.raises(NoNodeError):
        await zk.set("/a/b", b"x")
    with pytest.raises(NoNodeError):
        await zk.delete("/a/b")
    with pytest.raises(NoNodeError):
        await zk.ctime_ms("/a/b")
    assert await zk.create("/a/b", b"x", make_parents=True) == "/a/b"
    with pytest.raises(NodeExistsError):
        await zk.create("/a/b", b"y")
    assert await zk.get("/a/b") == (b"x", 0)
    assert await zk.set("/a/b", b"y", 0) == 1
    with pytest.raises(BadVersionError):
        await zk.set("/a/b", b"z", 0)
    assert await zk.set("/a/b", b"z") == 2
    assert await zk.get("/a/b") == (b"z", 2)
    with pytest.raises(BadVersionError):
        await zk.delete("/a/b", version=1)
    with pytest.raises(NotEmptyError):
        await zk.delete("/a")
    first = await zk.create("/a/s-", b"", sequential=True)
    second = await zk.create("/a/s-", b"", sequential=True)
    assert first.startswith("/a/s-") and len(first) == len("/a/s-") + 10
    assert int(second[-10:]) == int(first[-10:]) + 1
    assert sorted(await zk.get_children("/a")) == ["b", first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]]
    assert abs(await zk.ctime_ms("/a/b") - time.time() * 1000) < 60_000
    await zk.delete("/a/b", version=2)
    await zk.delete_recursive("/a")
    assert not await zk.exists("/a")
    await zk.delete_recursive("/a")  # already gone: no error
    await zk.ensure_path("/p/q/r")
    await zk.ensure_path("/p/q/r")
    assert await zk.exists("/p/q/r")
    assert await zk.get_children("/p/q/r") == []
    with pytest.raises(NoNodeError):
        await zk.get_children("/nope")


async def test_chroot_is_created_and_applied(zk_server: ZooKeeperServer, zk: ZkClient) -> None:
    await zk.create("/inside", b"1")
    async with zk_connect(zk_server) as raw:
        assert await raw.get(f"{CHROOT}/inside") == (b"1", 0)


async def test_ephemeral_goes_with_its_session(zk_server: ZooKeeperServer, zk: ZkClient) -> None:
    other = ZkClient(zk_server.connect_string + CHROOT, 4000)
    await other.start()
    await other.create("/eph", b"", ephemeral=True)
    assert await zk.exists("/eph")
    await other.close()
    assert not await zk.exists("/eph")


async def test_watches_see_changes_creation_and_deletion(zk: ZkClient) -> None:
    data: list[bytes | None] = []
    kids: list[list[str]] = []

    async def on_data(d: bytes | None) -> None:
        data.append(d)

    async def on_kids(c: list[str]) -> None:
        kids.append(sorted(c))

    wd = await zk.watch_data("/w/node", on_data)
    await zk.watch_children("/w", on_kids)
    await wait_for("watched data and children", lambda: data == [None] and kids == [[]], 15)
    await zk.create("/w/node", b"1", make_parents=True)
    await wait_for("watched data and children", lambda: data[-1] == b"1" and kids[-1] == ["node"], 15)
    await zk.set("/w/node", b"2")
    await wait_for("watched data", lambda: data[-1] == b"2", 15)
    await zk.create("/w/other", b"")
    await wait_for("watched children", lambda: kids[-1] == ["node", "other"], 15)
    await zk.delete("/w/node")
    await wait_for("watched data and children", lambda: data[-1] is None and kids[-1] == ["other"], 15)
    await zk.delete("/w/other")
    await zk.delete("/w")
    await wait_for("watched children", lambda: kids[-1] == [], 15)
    wd.cancel()
    await zk.create("/w/node", b"3", make_parents=True)
    await wait_for("watched children", lambda: kids[-1] == ["node"], 15)
    assert data[-1] is None


async def test_watch_callbacks_never_overlap_and_lose_nothing(zk: ZkClient) -> None:
    seen: list[bytes | None] = []
    running = 0
    overlapped = False

    async def slow(d: bytes | None) -> None:
        nonlocal running, overlapped
        running += 1
        overlapped |= running > 1
        await asyncio.sleep(0.05)
        seen.append(d)
        running -= 1

    await zk.create("/burst", b"0")
    await zk.watch_data("/burst", slow)
    for i in range(1, 30):
        await zk.set("/burst", str(i).encode())
    await wait_for("watched data", lambda: seen[-1:] == [b"29"], 15)
    assert not overlapped
    # Coalesced, not replayed one by one: a burst costs a few reads, not one per change.
    assert len(seen) < 30


async def test_survives_a_server_restart(zk_server: ZooKeeperServer) -> None:
    seen: list[bytes | None] = []
    kids: list[list[str]] = []
    sessions: list[bool] = []

    async def on_data(d: bytes | None) -> None:
        seen.append(d)

    async def on_kids(c: list[str]) -> None:
        kids.append(sorted(c))

    async def on_session(new: bool) -> None:
        sessions.append(new)

    # A long session: recovering must not wait for the heartbeat to notice the dead connection.
    async with zk_connect(zk_server, 20000) as zk:
        zk.on_session(on_session)
        await zk.create("/eph", b"", ephemeral=True)
        await zk.create("/r", b"before")
        await zk.watch_data("/r", on_data)
        await zk.watch_children("/", on_kids)
        await wait_for("watched data and children",
                       lambda: seen == [b"before"] and kids[-1:] == [["eph", "r", "zookeeper"]], 15)
        zk_server.stop()
        # An operation issued while the server is down completes once it is back.
        pending = asyncio.create_task(zk.get("/r"))
        await asyncio.sleep(0.5)
        assert not pending.done()
        t0 = time.monotonic()
        zk_server.start()
        async with zk_connect(zk_server) as other:
            # Changes made before our client is back: its watches must read afresh.
            await other.set("/r", b"during")
            await other.create("/new", b"")
        # It may run before or after the other client's change; either answer is a consistent read.
        assert await asyncio.wait_for(pending, 10) in ((b"before", 0), (b"during", 1))
        await wait_for("session events", lambda: sessions == [False], 5)
        assert time.monotonic() - t0 < 5
        await wait_for("watched data and children",
                       lambda: seen[-1] == b"during" and kids[-1] == ["eph", "new", "r", "zookeeper"], 5)
        assert await zk.exists("/eph")
        # The watches are armed again: later changes keep coming.
        await zk.set("/r", b"after")
        await zk.delete("/new")
        await wait_for("watched data and children",
                       lambda: seen[-1] == b"after" and kids[-1] == ["eph", "r", "zookeeper"], 5)
        # restart() proper: the session, and with it the ephemeral, outlives it.
        zk_server.restart()
        assert await zk.get("/r") == (b"after", 2)
        await wait_for("session events", lambda: sessions == [False, False], 5)
        assert await zk.exists("/eph")


async def test_in_flight_call_survives_a_kill(zk_server: ZooKeeperServer, zk: ZkClient) -> None:
    await zk.create("/k", b"v")
    zk_server.kill()
    call = asyncio.create_task(zk.get("/k"))
    await asyncio.sleep(1.0)
    assert not call.done()
    zk_server.start()
    assert await asyncio.wait_for(call, 10) == (b"v", 0)


async def test_set_fenced_lands_only_while_the_guard_is_unchanged(zk: ZkClient) -> None:
    """The controller's state writes: a check of /controller_epoch's version and the set, in one multi."""
    await zk.create("/epoch", b"1")
    await zk.create("/state", b"a")
    assert await zk.set_fenced("/state", b"b", 0, "/epoch", 0) == 1
    with pytest.raises(BadVersionError):  # the state moved: a conflict, as with set()
        await zk.set_fenced("/state", b"c", 0, "/epoch", 0)
    assert await zk.set("/epoch", b"2", 0) == 1  # another controller's election
    with pytest.raises(FencedError):  # the guard moved: nothing written, even with the right version
        await zk.set_fenced("/state", b"c", 1, "/epoch", 0)
    assert await zk.get("/state") == (b"b", 1)
    assert await zk.set_fenced("/state", b"c", 1, "/epoch", 1) == 2
    await zk.delete("/epoch")
    with pytest.raises(FencedError):
        await zk.set_fenced("/state", b"d", 2, "/epoch", 1)
    assert await zk.get("/state") == (b"c", 2)


async def test_kill_past_session_expiry_starts_a_new_session(zk_server: ZooKeeperServer) -> None:
    # A restarted ZooKeeper re-arms every session it reloads, so the client is kept away behind
    # a cut link until the restarted server has expired its session.
    proxy = TcpProxy(zk_server.port)
    await proxy.start()
    sessions: list[bool] = []
    seen: list[bytes | None] = []
    order: list[str] = []  # expiry, session callbacks and watch events, as they happen

    async def on_session(new: bool) -> None:
        order.append("session")
        sessions.append(new)
        if new:
            await zk.create("/eph", b"again", ephemeral=True)

    async def on_data(d: bytes | None) -> None:
        order.append(f"data {d!r}")
        seen.append(d)

    try:
        async with zk_connect(proxy.connect_string, 4000) as zk:
            zk.on_session(on_session)
            zk.on_session_expired(lambda: order.append("expired"))
            await zk.create("/eph", b"first", ephemeral=True)
            await zk.create("/d", b"1")
            await zk.watch_data("/d", on_data)
            await wait_for("watched data", lambda: seen == [b"1"], 15)
            old_session = zk.session_id
            zk_server.kill()
            proxy.block()
            zk_server.start()
            async with zk_connect(zk_server) as other:
                await wait_for("nothing", lambda: True, 1)
                deadline = time.monotonic() + 15
                while await other.exists("/eph"):
                    assert time.monotonic() < deadline, "session never expired"
                    await asyncio.sleep(0.2)
                await other.set("/d", b"2")
                proxy.unblock()
                await wait_for("session events", lambda: sessions == [True], 10)
                assert zk.session_id != old_session
                await wait_for("watched data", lambda: seen[-1] == b"2", 5)
                data, _ = await other.get("/eph")
                assert data == b"again"
                # The expiry is told once, synchronously, before anything of the new session (a
                # controller must have stopped before its broker registers again).
                assert order.count("expired") == 1 and order.index("expired") < order.index("session"), order
                assert order.index("expired") < order.index("data b'2'"), order
            await zk.set("/d", b"3")
            await wait_for("watched data", lambda: seen[-1] == b"3", 5)
    finally:
        await proxy.stop()


async def test_session_closed_behind_our_back_is_a_new_session(zk_server: ZooKeeperServer) -> None:
    proxy = TcpProxy(zk_server.port)
    await proxy.start()
    sessions: list[bool] = []
    seen: list[bytes | None] = []

    async def on_session(new: bool) -> None:
        sessions.append(new)

    async def on_data(d: bytes | None) -> None:
        seen.append(d)

    try:
        async with zk_connect(proxy.connect_string, 4000) as zk:
            zk.on_session(on_session)
            await zk.create("/eph", b"", ephemeral=True)
            await zk.create("/d", b"1")
            await zk.watch_data("/d", on_data)
            await wait_for("watched data", lambda: seen == [b"1"], 15)
            # Expire our session the way ZooKeeper's own tests do: a second connection takes over
            # the session id and password and closes it (our client kept away meanwhile, or it
            # would take the session straight back).
            proxy.block()
            thief = aiozk.ZKClient(zk_server.connect_string, session_timeout=4)
            thief.session.session_id = zk._zk.session.session_id
            thief.session.password = zk._zk.session.password
            await thief.start()
            await thief.close()
            proxy.unblock()
            await wait_for("session events", lambda: sessions == [True], 10)
            assert not await zk.exists("/eph")
            await zk.set("/d", b"2")
            await wait_for("watched data", lambda: seen[-1] == b"2", 15)
    finally:
        await proxy.stop()


async def test_unreachable_server_raises_zk_unavailable(tmp_path) -> None:  # noqa: ANN001
    from broker.zk.client import ZkUnavailable

    server = ZooKeeperServer(tmp_path / "zk")  # never started: its port refuses connections
    client = ZkClient(server.connect_string, 4000)
    t0 = time.monotonic()
    with pytest.raises(ZkUnavailable):
        await client.start(timeout=1.5)
    assert time.monotonic() - t0 < 5
    await client.close()
