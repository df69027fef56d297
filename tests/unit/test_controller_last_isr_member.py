"""The controller never empties an ISR (Kafka's doRemoveReplicasFromIsr keeps an ISR of one).

Found by tests/integration/test_storage_errors_writer.py: a single broker's log directory fills,
the controller makes its partitions leaderless (ISR kept), then the broker's LeaderAndIsr answer
of storage errors took it out of the ISR too, leaving `[]`; after the disk was fixed and the
broker restarted, nothing could lead those partitions again without an unclean election.
"""

from __future__ import annotations

from broker.controller.controller import Controller
from broker.zk import layout as L

TP = ("t", 0)


def _controller(state: L.PartitionState, replicas: list[int], live: list[int]) -> tuple[Controller, list]:
    controller = Controller(zk=object(), broker_id=0)  # type: ignore[arg-type]  # never started
    controller.ctx.active = True
    controller.ctx.live = {b: L.BrokerInfo(b, "127.0.0.1", 9092 + b) for b in live}
    controller.ctx.assignment = {TP[0]: {TP[1]: replicas}}
    controller.ctx.states[TP] = (state, 7)
    writes: list[L.PartitionState] = []

    async def write_state(tp: tuple[str, int], new: L.PartitionState, version: int) -> bool:
        writes.append(new)
        controller.ctx.states[tp] = (new, version + 1)
        return True

    controller.ctx.write_state = write_state  # type: ignore[method-assign]
    controller.ctx.send_leader_and_isr = lambda *a, **k: None  # type: ignore[method-assign]
    controller.ctx.send_update_metadata = lambda *a, **k: None  # type: ignore[method-assign]
    return controller, writes


async def test_a_leaderless_partitions_last_isr_member_answering_storage_errors_stays_in_the_isr() -> None:
    # The log dir failure already dropped the leader (NoLeader, ISR kept); then the broker's
    # LeaderAndIsr answer named the partition as a storage error.
    controller, writes = _controller(L.PartitionState(-1, 1, 1, [0]), replicas=[0], live=[0])
    await controller._replicas_offline(0, [TP])
    assert writes == []
    assert controller.ctx.states[TP][0].isr == [0]


async def test_a_replica_that_is_not_the_last_still_leaves_the_isr() -> None:
    controller, writes = _controller(L.PartitionState(1, 3, 1, [1, 0]), replicas=[1, 0], live=[0, 1])
    await controller._replicas_offline(0, [TP])
    assert [w.isr for w in writes] == [[1]]
    assert controller.ctx.states[TP][0].leader == 1


async def test_an_isr_of_one_is_kept_when_its_member_is_removed_by_any_path() -> None:
    controller, writes = _controller(L.PartitionState(-1, 2, 1, [2]), replicas=[2, 3], live=[2, 3])
    assert not await controller._remove_from_isr(TP, 2)
    assert writes == [] and controller.ctx.states[TP][0].isr == [2]
