"""broker.controller.Controller._remove_from_isr never empties an ISR (Kafka 2.8's
doRemoveReplicasFromIsr keeps a one-replica ISR as it is).

Found by the real-broker index-pass test (tests/integration/test_index_pass_failure.py): a
one-replica partition whose log directory failed got leader -1 with ISR [0] (as Kafka), and then
the broker's KAFKA_STORAGE_ERROR answer to the LeaderAndIsr took 0 out of the ISR too. With an
empty ISR the partition stayed offline after the broker restarted with its directory mended: only
an unclean election could have brought it back. The ZooKeeper write is stood in for here.
"""

from __future__ import annotations

from broker.controller.controller import Controller
from broker.zk import layout as L
from tests.support.controllers import recording_controller

TP = ("t", 0)


def controller_with(state: L.PartitionState) -> tuple[Controller, list[L.PartitionState]]:
    return recording_controller(TP, state)


async def test_the_last_member_of_a_leaderless_isr_stays() -> None:
    controller, written = controller_with(L.PartitionState(-1, 4, 1, [0]))
    assert await controller._remove_from_isr(TP, 0) is False
    assert written == [] and controller.ctx.states[TP][0].isr == [0]


async def test_a_follower_leaves_an_isr_with_others_in_it() -> None:
    controller, written = controller_with(L.PartitionState(1, 4, 1, [1, 0]))
    assert await controller._remove_from_isr(TP, 0) is True
    assert written == [L.PartitionState(1, 5, controller.ctx.epoch, [1])]


async def test_the_leader_is_not_removed_here() -> None:
    controller, written = controller_with(L.PartitionState(0, 4, 1, [0, 1]))
    assert await controller._remove_from_isr(TP, 0) is False
    assert written == []
