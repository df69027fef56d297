"""broker.zk against a real ZooKeeper, including a real server restart and a real session expiry."""

from __future__ import annotations

import asyncio
import time

import aiozk
import pytest

from broker.zk import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, ZkClient

pytestmark = pytest.mark.integration


async def until(pred, timeout: float = 15.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


@pytest.fixture
async def zk(zk_server):  # noqa: ANN001, ANN201
    c = ZkClient(zk_server.connect_string + "/chroot/test", 4000)
    await c.start()
    yield c
    await c.close()


async def test_crud_versions_and_errors(zk: ZkClient) -> None:
    with pytest.raises(NoNodeError):
        await zk.get("/a")
    with pytest.raises(NoNodeError):
        await zk.create("/a/b", b"x")
    assert await zk.create("/a/b", b"x", make_parents=True) == "/a/b"
    with pytest.raises(NodeExistsError):
        await zk.create("/a/b", b"y")
    assert await zk.get("/a/b") == (b"x", 0)
    assert await zk.set("/a/b", b"y", 0) == 1
    with pytest.raises(BadVersionError):
        await zk.set("/a/b", b"z", 0)
    assert await zk.get("/a/b") == (b"y", 1)
    with pytest.raises(NotEmptyError):
        await zk.delete("/a")
    seq = await zk.create("/a/s-", b"", sequential=True)
    assert seq.startswith("/a/s-") and len(seq) == len("/a/s-") + 10
    assert sorted(await zk.get_children("/a")) == ["b", seq.rsplit("/", 1)[1]]
    assert await zk.ctime_ms("/a/b") > 1_600_000_000_000
    await zk.delete_recursive("/a")
    assert not await zk.exists("/a")
    await zk.ensure_path("/p/q/r")
    await zk.ensure_path("/p/q/r")
    assert await zk.exists("/p/q/r")


async def test_chroot_is_created_and_applied(zk_server, zk: ZkClient) -> None:  # noqa: ANN001
    await zk.create("/inside", b"1")
    raw = ZkClient(zk_server.connect_string, 4000)
    await raw.start()
    try:
        assert await raw.get("/chroot/test/inside") == (b"1", 0)
    finally:
        await raw.close()


async def test_ephemeral_goes_with_its_session(zk_server, zk: ZkClient) -> None:  # noqa: ANN001
    other = ZkClient(zk_server.connect_string + "/chroot/test", 4000)
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
    await until(lambda: data == [None] and kids == [[]])
    await zk.create("/w/node", b"1", make_parents=True)
    await until(lambda: data[-1] == b"1" and kids[-1] == ["node"])
    await zk.set("/w/node", b"2")
    await until(lambda: data[-1] == b"2")
    await zk.create("/w/other", b"")
    await until(lambda: kids[-1] == ["node", "other"])
    await zk.delete("/w/node")
    await until(lambda: data[-1] is None and kids[-1] == ["other"])
    wd.cancel()
    await zk.create("/w/node", b"3")
    await asyncio.sleep(0.3)
    assert data[-1] is None


async def test_survives_a_server_restart(zk_server, zk: ZkClient) -> None:  # noqa: ANN001
    seen: list[bytes | None] = []
    sessions: list[bool] = []

    async def on_data(d: bytes | None) -> None:
        seen.append(d)

    async def on_session(new: bool) -> None:
        sessions.append(new)

    zk.on_session(on_session)
    await zk.create("/eph", b"", ephemeral=True)
    await zk.create("/r", b"before")
    await zk.watch_data("/r", on_data)
    await until(lambda: seen == [b"before"])
    zk_server.restart()
    # The next call rides out the reconnect; the session, and so the ephemeral, survive.
    assert await zk.get("/r") == (b"before", 0)
    await zk.set("/r", b"after")
    await until(lambda: seen[-1] == b"after")
    await until(lambda: sessions == [False])
    assert await zk.exists("/eph")


async def test_in_flight_call_survives_a_kill(zk_server, zk: ZkClient) -> None:  # noqa: ANN001
    await zk.create("/k", b"v")
    zk_server.kill()
    call = asyncio.create_task(zk.get("/k"))
    await asyncio.sleep(1.0)
    assert not call.done()
    zk_server.start()
    assert await asyncio.wait_for(call, 20) == (b"v", 0)


async def test_session_expiry_is_reported_and_watches_reread(zk_server, zk: ZkClient) -> None:  # noqa: ANN001
    sessions: list[bool] = []
    seen: list[bytes | None] = []

    async def on_session(new: bool) -> None:
        sessions.append(new)

    async def on_data(d: bytes | None) -> None:
        seen.append(d)

    zk.on_session(on_session)
    await zk.create("/eph", b"", ephemeral=True)
    await zk.create("/d", b"1")
    await zk.watch_data("/d", on_data)
    await until(lambda: seen == [b"1"])
    # Expire our session the way ZooKeeper's own tests do: a second connection that takes over
    # the session id and password, then closes it.
    thief = aiozk.ZKClient(zk_server.connect_string, session_timeout=4)
    thief.session.session_id = zk._zk.session.session_id
    thief.session.password = zk._zk.session.password
    await thief.start()
    await thief.close()
    await until(lambda: True in sessions, timeout=20)
    assert not await zk.exists("/eph")
    await zk.set("/d", b"2")
    await until(lambda: seen[-1] == b"2")
