"""broker.controller.Controller._adopt: a state found for a new partition is kept when it could be
its assignment's, else replaced by Kafka's first state with the next leader epoch (written with the
found zkVersion). The ZooKeeper write is stood in for here; tests/integration/
test_existing_partition_znodes.py does it on real brokers and a real ZooKeeper."""

from __future__ import annotations

from broker.controller.controller import Controller
from broker.zk import layout as L
from tests.support.controllers import recording_controller

TP = ("t", 0)


def controller_with(state: L.PartitionState, replicas: list[int], live: list[int]
                    ) -> tuple[Controller, list[L.PartitionState]]:
    controller, written = recording_controller(TP, state)
    controller.ctx.active = True
    controller.ctx.epoch = 6
    controller.ctx.live = {b: L.BrokerInfo(b, "127.0.0.1", 9) for b in live}
    controller.ctx.assignment = {TP[0]: {TP[1]: replicas}}
    return controller, written


async def test_a_coherent_state_whose_leader_is_alive_is_kept() -> None:
    controller, written = controller_with(L.PartitionState(1, 4, 2, [1, 0]), replicas=[0, 1], live=[0, 1])
    assert await controller._adopt(TP) is True
    assert written == [] and controller.ctx.states[TP] == (L.PartitionState(1, 4, 2, [1, 0]), 7)


async def test_a_coherent_state_whose_leader_is_gone_gets_a_leader_from_its_isr() -> None:
    controller, written = controller_with(L.PartitionState(1, 4, 2, [1, 0]), replicas=[0, 1], live=[0])
    assert await controller._adopt(TP) is True
    assert written == [L.PartitionState(0, 5, 6, [0])]


async def test_a_leader_outside_the_assignment_is_replaced() -> None:
    controller, written = controller_with(L.PartitionState(7, 4, 2, [7]), replicas=[1, 0, 2], live=[0, 1])
    assert await controller._adopt(TP) is True
    # Kafka's first state (first live assigned replica leads, every live one in the ISR), next epoch.
    assert written == [L.PartitionState(1, 5, 6, [1, 0])]


async def test_an_isr_outside_the_assignment_is_replaced_though_its_leader_is_assigned() -> None:
    controller, written = controller_with(L.PartitionState(0, 2, 2, [0, 3]), replicas=[0, 1], live=[0, 1, 3])
    assert await controller._adopt(TP) is True
    assert written == [L.PartitionState(0, 3, 6, [0, 1])]


async def test_with_no_assigned_replica_alive_the_leftover_stays() -> None:
    controller, written = controller_with(L.PartitionState(7, 4, 2, [7]), replicas=[1, 2], live=[0])
    assert await controller._adopt(TP) is False
    assert written == [] and controller.ctx.states[TP] == (L.PartitionState(7, 4, 2, [7]), 7)


async def test_a_controller_no_longer_active_writes_nothing() -> None:
    controller, written = controller_with(L.PartitionState(7, 4, 2, [7]), replicas=[0], live=[0])
    controller.ctx.active = False
    assert await controller._adopt(TP) is False
    assert written == []
