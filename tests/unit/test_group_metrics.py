"""broker/group_metrics.py: the group metrics' samples from coordinator snapshots."""

from __future__ import annotations

from broker.group.machine import GroupConfig, GroupMachine
from broker.group.store import CommittedOffset, GroupRecord, MemberRecord
from broker.group_metrics import GroupSnapshot, lag_rows, register_group_metrics, snapshots
from broker.metrics import Registry


def samples(text: str) -> dict[str, float]:
    return {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in text.splitlines()
            if line and not line.startswith("#")}


ENDS = {("t", 0): 100, ("t", 1): 50}


def log_end(topic: str, partition: int) -> int | None:
    return ENDS.get((topic, partition))


def test_lag_only_where_the_end_is_known() -> None:
    g = GroupSnapshot("g", "Stable", 2, 4, {("t", 0): 40, ("t", 1): 50, ("elsewhere", 0): 7})
    assert list(lag_rows([g], log_end)) == [
        ({"group": "g", "topic": "t", "partition": "0"}, 60.0),
        ({"group": "g", "topic": "t", "partition": "1"}, 0.0),
    ]


def test_the_four_families() -> None:
    groups = [GroupSnapshot("g1", "Stable", 3, 5, {("t", 0): 90}),
              GroupSnapshot("g2", "Empty", 0, 2, {("t", 1): 10})]
    r = Registry()
    register_group_metrics(r, lambda: groups, log_end)
    text = r.render()
    assert "# TYPE minibroker_group_rebalances_total counter" in text
    assert "# TYPE minibroker_consumer_group_state gauge" in text
    assert samples(text) == {
        'minibroker_consumer_group_lag{group="g1",partition="0",topic="t"}': 10.0,
        'minibroker_consumer_group_lag{group="g2",partition="1",topic="t"}': 40.0,
        'minibroker_consumer_group_members{group="g1"}': 3.0,
        'minibroker_consumer_group_members{group="g2"}': 0.0,
        'minibroker_consumer_group_state{group="g1"}': 3.0,
        'minibroker_consumer_group_state{group="g2"}': 0.0,
        'minibroker_group_rebalances_total{group="g1"}': 5.0,
        'minibroker_group_rebalances_total{group="g2"}': 2.0,
    }
    groups.clear()
    assert samples(r.render()) == {}


class NoTimers:
    def schedule(self, key: object, delay_ms: int, action: object) -> None:
        pass

    def cancel(self, key: object) -> None:
        pass


def test_snapshots_read_the_loaded_groups_of_the_coordinator() -> None:
    machine = GroupMachine(1, GroupConfig(), lambda: 1_000, NoTimers(), lambda *a: None,
                           lambda group: {"a": 0, "b": 0, "other": 1}[group])
    member = MemberRecord("m-1", None, "c", "/127.0.0.1", 30000, 10000, b"", b"")
    record = GroupRecord("consumer", 3, "range", "m-1", 900, (member,))
    machine.partition_loaded(0, {"a": record}, {"a": {("t", 0): CommittedOffset(7, -1, "", 900)},
                                                "b": {("t", 1): CommittedOffset(5, -1, "", 900)}})
    machine.partition_loaded(1, {}, {"other": {("t", 0): CommittedOffset(1, -1, "", 900)}})
    machine.partition_unloaded(1)
    got = sorted(snapshots(machine), key=lambda s: s.group_id)
    assert got == [GroupSnapshot("a", "Stable", 1, 0, {("t", 0): 7}), GroupSnapshot("b", "Empty", 0, 0, {("t", 1): 5})]
