"""A controller superseded without noticing writes nothing (Kafka's controller-epoch fence).

Every partition state write of a controller's term is one ZooKeeper multi-op that first checks
`/controller_epoch` at the zkVersion its election left there. Here a real controller (in this
process, on a real ZooKeeper, with registrations written by the test) keeps believing it leads
while a newer election has bumped `/controller_epoch` (its `/controller` watch has not fired:
the state a controller thawed from a pause, or cut from ZooKeeper, can be in); a broker failure
then makes it elect a new leader. The write is refused by ZooKeeper, the state znode is left as
it was, and the controller stops acting.
"""

from __future__ import annotations

import json

import pytest

from broker.controller.controller import Controller
from broker.zk import layout as L
from broker.zk.server import ZooKeeperServer
from tests.support.ports import free_port
from tests.support.waiting import wait_for
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.integration

CONTROLLER_ID = 9


async def test_a_superseded_controller_cannot_write_partition_state(zk_server: ZooKeeperServer) -> None:
    async with zk_connect(zk_server, 6000) as zk, zk_connect(zk_server, 6000) as others:
        for path in L.PERSISTENT_PATHS:
            await others.ensure_path(path)
        for b in (1, 2):  # two brokers (nothing listens at their ports: requests to them just retry)
            await others.create(L.broker_path(b), L.BrokerInfo(b, "127.0.0.1", free_port()).encode(), ephemeral=True)
        await others.create(L.topic_path("t"), L.encode_assignment({0: [1, 2]}))
        controller = Controller(zk, CONTROLLER_ID)
        await controller.start()
        try:
            async def first_state() -> dict | None:
                data, _ = await others.get(L.partition_state_path("t", 0))
                return json.loads(data)
            before = await wait_for("the controller's first state of t-0", first_state, 15)
            assert controller.active and before["leader"] == 1 and before["isr"] == [1, 2], before

            # A newer controller's election, which this one has not heard of.
            data, version = await others.get(L.CONTROLLER_EPOCH)
            await others.set(L.CONTROLLER_EPOCH, str(int(data) + 1).encode(), version)
            await others.delete(L.broker_path(1))  # t-0's leader fails: the controller would elect 2

            await wait_for("the controller fenced", lambda: not controller.active, 15)
            assert await first_state() == before  # nothing written on the superseded term
        finally:
            await controller.stop()
