"""broker.controller.first_state: which found states a new partition may adopt, and what replaces the others."""

from __future__ import annotations

import pytest

from broker.controller.first_state import NO_LEADER, coherent, first_state, replacing
from broker.zk import layout as L


@pytest.mark.parametrize(("leader", "isr", "replicas", "expected"), [
    (1, [1, 2], [0, 1, 2], True),           # leader and ISR assigned
    (2, [2], [0, 1, 2], True),              # an ISR smaller than the assignment
    (NO_LEADER, [0], [0, 1], True),         # an offline partition's state (Kafka keeps one member)
    (NO_LEADER, [], [0, 1], True),          # no leader, no ISR: nothing outside the assignment
    (7, [7], [0, 1], False),                # a leader never assigned (broker 7 does not exist)
    (7, [0, 1], [0, 1], False),             # the leader alone outside
    (0, [0, 3], [0, 1], False),             # an ISR member outside the assignment
    (NO_LEADER, [5], [0, 1], False),        # no leader, and an ISR of another assignment
    (1, [2], [0, 1, 2], False),             # an assigned leader outside its own ISR
    (1, [], [0, 1], False),                 # an assigned leader with an empty ISR
])
def test_coherent(leader: int, isr: list[int], replicas: list[int], expected: bool) -> None:
    assert coherent(L.PartitionState(leader, 3, 1, isr), replicas) is expected


def test_first_state_is_kafkas_new_partition_state() -> None:
    # initializeLeaderAndIsrForPartitions: the first live assigned replica leads, all live ones in the ISR.
    assert first_state([2, 0], controller_epoch=4) == L.PartitionState(2, 0, 4, [2, 0])
    assert first_state([], controller_epoch=4) is None


def test_a_replacement_takes_the_next_leader_epoch() -> None:
    stale = L.PartitionState(7, 9, 2, [7, 3])
    alive = [1, 0]
    new = replacing(stale, alive, controller_epoch=5)
    assert new == L.PartitionState(1, 10, 5, [1, 0])
    assert new is not None and new.isr is not alive  # its own list, not the caller's
    assert coherent(new, [1, 0, 2])
    assert replacing(stale, [], controller_epoch=5) is None
