"""The consumer-group metrics of the broker that coordinates the groups, read when scraped.

- `consumer_group_members{group}`: members of the group now (pending members not counted).
- `consumer_group_state{group}`: the group's state as a number, in the order of Kafka's state
  machine: 0 Empty, 1 PreparingRebalance, 2 CompletingRebalance, 3 Stable, 4 Dead (the name is
  in the metric's HELP text; `minibroker groups --describe` shows it by name).
- `group_rebalances_total{group}`: rebalances completed (the leader's SyncGroup of a new
  generation) while this broker coordinated the group: the coordinator's own count
  (`GroupMachine.completed_rebalances`). A new coordinator, after a failover or a restart,
  counts from 0, which Prometheus reads as a counter reset.
- `consumer_group_lag{group,topic,partition}`: log end offset - committed offset, for every
  committed offset of a group, where this broker knows the partition's end: it holds a replica
  of it. The end is the replica's high watermark (what consumers can read, and what
  `minibroker groups --describe` shows as LOG-END-OFFSET): exact on the partition's leader; on a
  follower the high watermark the leader last sent, at most one fetch round behind. Partitions
  this broker holds no replica of have no lag series here (the coordinator would otherwise have
  to ask other brokers on every scrape); give topics a replica on every broker, or sum the
  describe output, to see all of them.

Only groups this broker coordinates (it leads their `__consumer_offsets` partition and has
loaded it) appear; when the coordinator moves, the series move with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.metrics import GaugeRows, Registry

if TYPE_CHECKING:
    from broker.group.machine import GroupMachine

TopicPartition = tuple[str, int]

STATE_NUMBERS = {"Empty": 0, "PreparingRebalance": 1, "CompletingRebalance": 2, "Stable": 3, "Dead": 4}


@dataclass(frozen=True)
class GroupSnapshot:
    """What the metrics read of one coordinated group."""

    group_id: str
    state: str  # Kafka's state name
    members: int
    rebalances: int  # completed while this broker coordinated the group
    committed: Mapping[TopicPartition, int]  # committed offset per partition


def snapshots(machine: GroupMachine) -> list[GroupSnapshot]:
    """The groups of the `__consumer_offsets` partitions this broker has loaded, read from the
    coordinator's public state (no lock needed: both run on the event loop)."""
    out = []
    for group_id, group in list(machine.groups.items()):
        if machine.partition_for(group_id) not in machine.owned:
            continue
        out.append(GroupSnapshot(group_id, group.state.value, group.size, machine.completed_rebalances.get(group_id, 0),
                                 {tp: c.offset for tp, c in group.all_offsets().items()}))
    return out


def lag_rows(groups: Iterable[GroupSnapshot], log_end: Callable[[str, int], int | None]) -> GaugeRows:
    rows = []
    for g in groups:
        for (topic, partition), offset in sorted(g.committed.items()):
            end = log_end(topic, partition)
            if end is not None and offset >= 0:
                rows.append(({"group": g.group_id, "topic": topic, "partition": str(partition)}, float(end - offset)))
    return rows


def register_group_metrics(m: Registry, groups: Callable[[], Iterable[GroupSnapshot]],
                           log_end: Callable[[str, int], int | None]) -> None:
    """`groups()`: the coordinated groups now; `log_end(topic, partition)`: the local replica's
    high watermark, None without a replica."""
    m.gauge("consumer_group_lag", "Log end (high watermark) minus committed offset, per committed partition of a "
            "coordinated group whose partition has a replica on this broker",
            lambda: lag_rows(groups(), log_end))
    m.gauge("consumer_group_members", "Members of each coordinated group",
            lambda: [({"group": g.group_id}, g.members) for g in groups()])
    m.gauge("consumer_group_state", "State of each coordinated group: 0 Empty, 1 PreparingRebalance, "
            "2 CompletingRebalance, 3 Stable, 4 Dead",
            lambda: [({"group": g.group_id}, STATE_NUMBERS[g.state]) for g in groups() if g.state in STATE_NUMBERS])
    m.counter_fn("group_rebalances_total", "Rebalances of each coordinated group completed on this coordinator",
                 lambda: [({"group": g.group_id}, g.rebalances) for g in groups()])
