"""A Controller that is never started, for unit tests of its decisions: one partition's state
as found in ZooKeeper (zkVersion 7) and the state writes it makes, recorded instead of sent."""

from __future__ import annotations

from broker.controller.controller import Controller
from broker.zk import layout as L


def recording_controller(tp: tuple[str, int], state: L.PartitionState
                         ) -> tuple[Controller, list[L.PartitionState]]:
    controller = Controller(zk=object(), broker_id=0)  # type: ignore[arg-type]  # never started
    controller.ctx.states[tp] = (state, 7)
    written: list[L.PartitionState] = []

    async def write_state(at: tuple[str, int], new: L.PartitionState, version: int) -> bool:
        assert at == tp and version == 7
        written.append(new)
        controller.ctx.states[at] = (new, version + 1)
        return True
    controller.ctx.write_state = write_state  # type: ignore[method-assign]
    return controller, written
