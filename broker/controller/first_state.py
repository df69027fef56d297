"""A new partition's first state, and whether a state found where it was to be written may stand.

Pure decisions of the controller's partition creation (Controller._bring_online), no I/O.

Kafka 2.8's NewPartition -> OnlinePartition (PartitionStateMachine.initializeLeaderAndIsrForPartitions)
gives a new partition the first live replica of its assignment as leader and every live
assigned replica as ISR, in assignment order, and creates the state znode. When that znode
exists already it only logs a failed state change (NodeExists) and leaves the partition in
NewPartition, with no leader and nothing sent, until the next controller failover reads the
state as it finds it. minibroker instead keeps (adopts) such a state and sends it, so the
partition comes up at once; but only a state that could belong to this assignment: one whose
ISR is a subset of the assigned replicas and whose leader is none (-1) or in that ISR. Any other
is a leftover of another incarnation (a topic deleted and made again with another assignment,
say): kept, its leader would never be told it leads (LeaderAndIsr goes to the assigned replicas)
or, being gone, could never be replaced cleanly from an ISR that shares nobody with the
assignment. Such a state is replaced by the first state Kafka would have created, with the next
leader epoch, as no broker of this partition's incarnation can hold data yet.
"""

from __future__ import annotations

from broker.zk import layout as L

NO_LEADER = -1


def coherent(state: L.PartitionState, replicas: list[int]) -> bool:
    """The state could be this assignment's: its ISR within the replicas, and its leader none or
    an assigned replica in that ISR (Kafka never writes a leader outside its ISR)."""
    assigned = set(replicas)
    return assigned.issuperset(state.isr) and (state.leader == NO_LEADER or state.leader in state.isr)


def first_state(alive: list[int], controller_epoch: int, leader_epoch: int = 0) -> L.PartitionState | None:
    """Kafka's first state: the first live assigned replica leads, every live assigned replica
    is in the ISR (`alive` in assignment order); None when no assigned replica is alive."""
    if not alive:
        return None
    return L.PartitionState(alive[0], leader_epoch, controller_epoch, list(alive))


def replacing(stale: L.PartitionState, alive: list[int], controller_epoch: int) -> L.PartitionState | None:
    """The first state written over an incoherent `stale` one: its leader epoch one above the
    stale state's, so that no broker holding the stale epoch takes the new state for an older one."""
    return first_state(alive, controller_epoch, stale.leader_epoch + 1)
