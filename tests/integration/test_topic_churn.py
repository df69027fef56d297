"""Topics created and deleted over and over leave nothing behind in the controller.

The fuzz suite creates topics under thousands of mutated names and deletes them again; every
name the controller ever saw used to keep its topic data watch (a task, an asyncio.Event, four
aiozk callback entries) for the life of the process, which was part of the broker's RSS growth
under the fuzzer. Here the controller runs in-process against a real ZooKeeper, with topics
made and deleted through the znodes exactly as the admin APIs write them.
"""

from __future__ import annotations

import asyncio

import pytest

from broker.controller.controller import Controller
from broker.zk import layout as L
from broker.zk.client import NoNodeError, ZkClient
from broker.zk.server import ZooKeeperServer
from tests.support.waiting import wait_for
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.integration

TOPICS = 30


async def _exists(zk: ZkClient, path: str) -> bool:
    try:
        await zk.get(path)
        return True
    except NoNodeError:
        return False


async def _started_controller(zk: ZkClient) -> Controller:
    for path in L.PERSISTENT_PATHS:  # as a broker's start-up makes them
        await zk.ensure_path(path)
    controller = Controller(zk, broker_id=0)
    await controller.start()
    await wait_for("controller elected", lambda: controller.active, 10)
    return controller


def _topic_callbacks(zk: ZkClient) -> list[object]:
    """aiozk's callback-table entries for any /brokers/topics/<t> path."""
    return [key for key in zk._zk.session.watch_callbacks if str(key[1]).startswith(L.BROKER_TOPICS + "/")]


async def test_deleted_topics_leave_no_watches(zk_server: ZooKeeperServer) -> None:
    async with zk_connect(zk_server) as zk:
        controller = await _started_controller(zk)
        try:
            await asyncio.sleep(0.2)  # its own watches armed
            watches_before = len(zk._watches)
            for i in range(TOPICS):
                name = f"churn-{i}"
                # Broker 0 is not registered: the controller learns the topic but brings no partition
                # online, which is all this test needs of it.
                await zk.create(L.topic_path(name), L.encode_assignment({0: [0], 1: [0]}), make_parents=True)
                await wait_for(f"{name} known", lambda n=name: n in controller.ctx.assignment, 10)
                assert name in controller._topic_watches
                await zk.create(f"{L.DELETE_TOPICS}/{name}", b"", make_parents=True)
                await wait_for(f"{name} deleted", lambda n=name: n not in controller.ctx.assignment, 10)
            assert not await _exists(zk, L.topic_path(f"churn-{TOPICS - 1}"))
            await asyncio.sleep(0.5)  # any watch task still re-arming after its topic's deletion
            assert controller._topic_watches == {}
            assert len(zk._watches) == watches_before
            assert _topic_callbacks(zk) == []
            assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("zk-watch " + L.BROKER_TOPICS + "/")]
        finally:
            await controller.stop()


async def test_recreated_topic_is_watched_again(zk_server: ZooKeeperServer) -> None:
    """A name deleted and created again gets a fresh watch: its partition growth is still seen."""
    async with zk_connect(zk_server) as zk:
        controller = await _started_controller(zk)
        try:
            name = "again"
            for _ in range(2):
                await zk.create(L.topic_path(name), L.encode_assignment({0: [0]}), make_parents=True)
                await wait_for("topic known", lambda: name in controller.ctx.assignment, 10)
                await zk.create(f"{L.DELETE_TOPICS}/{name}", b"", make_parents=True)
                await wait_for("topic deleted", lambda: name not in controller.ctx.assignment, 10)
            await zk.create(L.topic_path(name), L.encode_assignment({0: [0]}), make_parents=True)
            await wait_for("topic known", lambda: name in controller.ctx.assignment, 10)
            await zk.set(L.topic_path(name), L.encode_assignment({0: [0], 1: [0], 2: [0]}))
            await wait_for("partitions added", lambda: len(controller.ctx.assignment.get(name, {})) == 3, 10)
            assert len(_topic_callbacks(zk)) == 4  # one watch: its four event kinds
        finally:
            await controller.stop()
