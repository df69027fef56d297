"""ReplicaManager as the one owner of partition state: follower truncation and restart, the ISR."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.log.dirs import InvalidPartitionName
from broker.metadata import MetadataCache
from broker.metrics import Registry
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.replication.roles import PartitionRoles
from broker.zk.client import ZkClient
from broker.zk.layout import BrokerInfo
from broker.zk.topic_configs import TopicConfigs
from protocol.errors import ErrorCode
from protocol.records.compression import GZIP
from protocol.records.message_set import build_message_set
from protocol.records.validator import ValidationConfig
from tests.support.batches import stamped_batch as batch

TP = ("t", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def records(n: int, base: int = 0) -> bytes:
    return build_message_set([(None, b"v%d" % i, 0) for i in range(n)], base_offset=base)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rm(tmp_path: Path, clock: Clock) -> ReplicaManager:
    config = BrokerConfig(broker_id=1, log_dirs=[tmp_path], replica_lag_time_max_ms=10_000)
    # Never started: nothing here talks to ZooKeeper.
    return ReplicaManager(config, ZkClient("127.0.0.1:1"), Registry(), clock=clock)


def test_follower_truncation_cuts_log_and_high_watermark(rm: ReplicaManager) -> None:
    part = rm.become_follower("t", 0, [1, 2], 2, 0, [1, 2], 0, 1, None)
    rm.append_as_follower(part, records(10), leader_hw=8)
    assert (part.log_end_offset, part.high_watermark) == (10, 8)
    rm.truncate_follower(TP, 5)
    assert (part.log_end_offset, part.high_watermark) == (5, 5)
    rm.truncate_follower(TP, 7)  # above the log end: nothing to cut, the high watermark stays
    assert (part.log_end_offset, part.high_watermark) == (5, 5)
    rm.truncate_follower(("t", 9), 0)  # not hosted: ignored


def test_follower_restart_starts_empty_at_the_leaders_log_start(rm: ReplicaManager) -> None:
    part = rm.become_follower("t", 0, [1, 2], 2, 0, [1, 2], 0, 1, None)
    rm.append_as_follower(part, records(3), leader_hw=3)
    rm.restart_follower_at(TP, 100)
    assert (part.log.log_start_offset, part.log_end_offset, part.high_watermark) == (100, 100, 100)
    rm.append_as_follower(part, records(2, base=100), leader_hw=101)
    assert (part.log_end_offset, part.high_watermark) == (102, 101)
    rm.restart_follower_at(("t", 9), 0)  # not hosted: ignored


def test_leader_high_watermark_follows_the_partitions_isr(rm: ReplicaManager) -> None:
    part = rm.become_leader("t", 0, [1, 2, 3], 0, [1, 2, 3], 0, 1, 1, None)
    rm.append(part, records(10), acks=1, config=ValidationConfig(1 << 20))
    rm.record_follower_fetch(part, 2, 10)
    rm.record_follower_fetch(part, 3, 4)
    assert part.high_watermark == 4  # 3 is in the ISR and holds it back
    # A new LeaderAndIsr for the same leader: the ISR changes, the followers' progress stays.
    rm.become_leader("t", 0, [1, 2, 3], 1, [1, 2], 1, 1, 1, None)
    assert part.isr == [1, 2] and part.high_watermark == 10
    assert part.tracker is not None and part.tracker.followers[3].log_end_offset == 4


async def test_appends_wake_followers_and_high_watermark_moves_wake_consumers_and_produces(
        rm: ReplicaManager) -> None:
    """Each wait wakes on what can change its answer: a follower's fetch on the log end, a
    consumer's fetch and an acks=all produce on the high watermark; `wake` (a new epoch, an
    ISR change, the replica stopped) on either."""
    part = rm.become_leader("t", 0, [1, 2, 3], 0, [1, 2, 3], 0, 1, 1, None)

    def waiting() -> tuple[asyncio.Task[None], asyncio.Task[None], asyncio.Task[ErrorCode]]:
        return (asyncio.create_task(rm.wait_for_fetch([TP], follower=True, timeout_s=30)),
                asyncio.create_task(rm.wait_for_fetch([TP], follower=False, timeout_s=30)),
                asyncio.create_task(rm.wait_for_hw(part, part.log_end_offset + 1, 30)))

    follower, consumer, produce = waiting()
    await asyncio.sleep(0)
    rm.append(part, records(1), acks=-1, config=ValidationConfig(1 << 20))  # 2 and 3 still at 0
    await asyncio.sleep(0)
    assert follower.done() and not consumer.done() and not produce.done()
    follower = asyncio.create_task(rm.wait_for_fetch([TP], follower=True, timeout_s=30))
    await asyncio.sleep(0)
    rm.record_follower_fetch(part, 2, 1)  # 3 holds the high watermark back: nothing wakes
    await asyncio.sleep(0)
    assert not (follower.done() or consumer.done() or produce.done())
    rm.record_follower_fetch(part, 3, 1)  # the high watermark moves to 1
    for _ in range(3):
        await asyncio.sleep(0)
    assert part.high_watermark == 1
    assert consumer.done() and produce.done() and produce.result() == ErrorCode.NONE
    assert not follower.done()  # its answer (the log end) did not change
    follower, consumer, produce = waiting()
    await asyncio.sleep(0)
    rm.become_leader("t", 0, [1, 2, 3], 1, [1, 2], 1, 1, 1, None)  # a new epoch: every wait looks again
    for _ in range(3):
        await asyncio.sleep(0)
    assert follower.done() and consumer.done()
    produce.cancel()  # still short of its offset: it waits on, as it should


class FakeFetchers:
    def __init__(self) -> None:
        self.assigned: dict[tuple[str, int], int] = {}

    def add(self, part: Partition, leader: BrokerInfo) -> None:
        self.assigned[part.key] = leader.broker_id

    def remove(self, tp: tuple[str, int]) -> None:
        self.assigned.pop(tp, None)


def state(leader: int, epoch: int, replicas: list[int] | None = None) -> dict[str, Any]:
    return {"topic_name": "t", "partition_index": 0, "controller_epoch": 1, "leader": leader, "leader_epoch": epoch,
            "isr": replicas or [1, 2], "zk_version": 0, "replicas": replicas or [1, 2]}


async def test_roles_follow_leader_and_isr(rm: ReplicaManager) -> None:
    fetchers = FakeFetchers()
    configs = TopicConfigs(ZkClient("127.0.0.1:1"))
    configs.set("t", {"segment.bytes": "4096", "min.insync.replicas": "2"})
    roles = PartitionRoles(rm.config, rm, fetchers, MetadataCache(), configs)  # type: ignore[arg-type]
    leaders = {2: ("127.0.0.1", 9)}
    # A negative leader epoch (a fuzzed request) is refused before any log is opened.
    assert await roles.apply_partition_state(state(2, -65536), leaders) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert await roles.apply_partition_state(state(1, -1), leaders) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert rm.get("t", 0) is None
    assert await roles.apply_partition_state(state(2, 3), leaders) == ErrorCode.NONE
    part = rm.get("t", 0)
    assert part is not None and part.leader == 2 and fetchers.assigned == {TP: 2}
    assert part.log.segment_bytes == 4096
    assert await roles.apply_partition_state(state(1, 2), leaders) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert part.leader == 2
    assert await roles.apply_partition_state(state(1, 4), leaders) == ErrorCode.NONE
    assert part.leader == 1 and part.min_insync_replicas == 2 and fetchers.assigned == {}
    assert await roles.apply_partition_state(state(3, 5, [1, 3]), {}) == ErrorCode.LEADER_NOT_AVAILABLE
    assert await roles.apply_partition_state(state(2, 6, [2, 3]), leaders) == ErrorCode.NONE  # not a replica here
    roles.stop_replica("t", 0, delete=True)
    assert rm.get("t", 0) is None


def test_follower_truncation_into_a_compressed_wrapper_keeps_hw_within_the_log(rm: ReplicaManager) -> None:
    # Divergent logs (an unclean election): our gzip wrapper holds 0-4, the new leader's log ends at 3.
    part = rm.become_follower("t", 0, [1, 2], 2, 0, [1, 2], 0, 1, None)
    wrapper = build_message_set([(None, b"v%d" % i, 0) for i in range(5)], codec=GZIP)
    rm.append_as_follower(part, wrapper, leader_hw=5)
    assert (part.log_end_offset, part.high_watermark) == (5, 5)
    rm.truncate_follower(TP, 3)  # the wrapper straddles 3 and goes whole
    assert part.log_end_offset == 0
    assert part.high_watermark == 0  # never above the log end


def test_becoming_follower_leaves_truncation_to_the_fetcher(rm: ReplicaManager) -> None:
    # KIP-101: become_follower cuts nothing; the replica fetcher truncates by leader epoch, or
    # (a log without epochs, as this magic-1 one) to the high watermark, through truncate_follower.
    part = rm.become_follower("t", 0, [1, 2], 2, 0, [1, 2], 0, 1, None)
    wrapper = build_message_set([(None, b"v%d" % i, 0) for i in range(5)], codec=GZIP)
    rm.append_as_follower(part, wrapper, leader_hw=3)  # a divergent leader's high watermark, mid-wrapper
    assert (part.log_end_offset, part.high_watermark) == (5, 3)
    rm.become_follower("t", 0, [1, 2], 2, 1, [1, 2], 0, 1, None)
    assert (part.log_end_offset, part.high_watermark) == (5, 3)
    assert rm.latest_epoch(TP) is None  # magic-1 data: the fetcher falls back to the high watermark
    rm.truncate_follower(TP, part.high_watermark)  # the wrapper straddles 3 and goes whole
    assert (part.log_end_offset, part.high_watermark) == (0, 0)


def test_illegal_names_never_reach_the_filesystem(rm: ReplicaManager, tmp_path: Path) -> None:
    # The handlers refuse these first; the replica manager refuses them on its own as well.
    victim = tmp_path.parent / f"{tmp_path.name}-victim-0"
    victim.mkdir()
    try:
        for topic in (f"../{tmp_path.name}-victim", str(victim)[:-2]):
            with pytest.raises(InvalidPartitionName):
                rm.stop_replica(topic, 0, delete=True)
            with pytest.raises(InvalidPartitionName):
                rm.become_leader(topic, 0, [1], 0, [1], 0, 1, 1, None)
        with pytest.raises(InvalidPartitionName):
            rm.become_follower("t", -1, [1, 2], 2, 0, [1, 2], 0, 1, None)
        assert victim.is_dir()
        assert rm.partitions == {}
        assert list(tmp_path.iterdir()) == []
    finally:
        victim.rmdir()


def test_follower_fetch_beyond_the_log_end_records_nothing(rm: ReplicaManager, clock: Clock) -> None:
    # Issue 15.3: a client posing as follower 2 with fetch_offset 10**12 moved the high watermark.
    part = rm.become_leader("t", 0, [1, 2], 0, [1, 2], 0, 1, 2, None)
    rm.append(part, records(10), acks=-1)
    rm.record_follower_fetch(part, 2, 4)
    assert rm.check_follower_fetch(part, 2, 10**12) == "out_of_range"
    clock.now = 5_000
    assert rm.record_follower_fetch(part, 2, 10**12) is False
    assert rm.record_follower_fetch(part, 2, 11) is False  # one past the log end
    assert part.high_watermark == 4
    assert part.tracker is not None
    st = part.tracker.followers[2]
    assert (st.log_end_offset, st.last_fetch_ms) == (4, 0.0)  # nothing recorded, not even the time
    assert rm.record_follower_fetch(part, 2, 10) is True  # the log end itself is a real position
    assert part.high_watermark == 10


def test_follower_fetch_below_the_log_start_records_nothing(rm: ReplicaManager) -> None:
    part = rm.become_leader("t", 0, [1, 2], 0, [1, 2], 0, 1, 1, None)
    part.log.truncate_fully_and_start_at(100)
    rm.append(part, records(5, base=100), acks=1)
    assert rm.check_follower_fetch(part, 2, 99) == "out_of_range"
    assert rm.record_follower_fetch(part, 2, 99) is False
    assert part.tracker is not None and part.tracker.followers[2].log_end_offset == 0
    assert rm.check_follower_fetch(part, 2, 100) == "ok"


def test_fetch_from_a_replica_id_that_is_not_an_assigned_follower_records_nothing(rm: ReplicaManager) -> None:
    part = rm.become_leader("t", 0, [1, 2], 0, [1], 0, 1, 1, None)
    rm.append(part, records(10), acks=1, config=ValidationConfig(1 << 20))
    for replica_id in (7, 1):  # a broker that holds no replica; the leader itself
        assert rm.check_follower_fetch(part, replica_id, 10) == "not_assigned"
        assert rm.record_follower_fetch(part, replica_id, 10) is False
    assert part.isr == [1] and rm._tasks == []  # no ISR expansion started
    assert part.tracker is not None and set(part.tracker.followers) == {2}
    assert rm.check_follower_fetch(part, 2, 10) == "ok"


def test_a_follower_fetch_on_a_partition_this_broker_does_not_lead_records_nothing(rm: ReplicaManager) -> None:
    part = rm.become_follower("t", 0, [1, 2], 2, 0, [1, 2], 0, 1, None)
    assert rm.check_follower_fetch(part, 2, 0) == "not_assigned"
    assert rm.record_follower_fetch(part, 2, 0) is False


def test_leader_epochs_follow_roles_appends_and_truncation(rm: ReplicaManager, tmp_path: Path) -> None:
    part = rm.become_follower("t", 0, [1, 2], 2, 3, [1, 2], 0, 1, None)
    rm.append_as_follower(part, batch(0, 3, 2) + batch(3, 2, 3), leader_hw=5)  # the leader's stamped epochs
    assert part.epochs.cache.entries == [(2, 0), (3, 3)]
    assert rm.end_offset_for_epoch(TP, 2) == (2, 3)
    assert rm.latest_epoch(TP) == 3
    rm.become_leader("t", 0, [1, 2], 5, [1, 2], 0, 1, 1, None)
    assert part.epochs.cache.entries == [(2, 0), (3, 3), (5, 5)]  # this leader's epoch starts at its log end
    assert rm.last_offset_for_leader_epoch(part, 5, 4) == (ErrorCode.NONE, 3, 5)
    assert rm.last_offset_for_leader_epoch(part, 4, 4)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert rm.last_offset_for_leader_epoch(part, 6, 4)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert [rm.epoch_for_offset(part, o) for o in (0, 3, 4, 5, 9)] == [2, 3, 3, 5, 5]
    rm.become_follower("t", 0, [1, 2], 2, 6, [1, 2], 0, 1, None)
    assert rm.last_offset_for_leader_epoch(part, -1, 3)[0] == ErrorCode.NOT_LEADER_FOR_PARTITION
    rm.truncate_follower(TP, 3)
    assert part.epochs.cache.entries == [(2, 0)]
    rm.truncate_follower(TP, 0)
    assert part.epochs.cache.entries == []
    rm.restart_follower_at(TP, 40)
    rm.append_as_follower(part, batch(40, 1, 7), leader_hw=41)
    assert part.epochs.cache.entries == [(7, 40)]
    rm.restart_follower_at(TP, 90)
    assert part.epochs.cache.entries == []
    assert rm.epoch_syncs.sync() == []  # the file's writes wait for the next LeaderAndIsr answer (or 5 s)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n0\n"


async def test_the_fetch_handlers_one_call_checks_and_records_as_the_two_calls_do(tmp_path: Path) -> None:
    """ReplicaManager.follower_fetch (the Fetch handler's per-partition call) answers as
    check_follower_fetch, and records (ISR progress, the high watermark, an ISR expansion) as
    record_follower_fetch does, only when asked to and only when the answer is "ok"."""
    def fresh(name: str) -> tuple[ReplicaManager, Partition, Clock]:
        clock = Clock()
        (tmp_path / name).mkdir()
        config = BrokerConfig(broker_id=1, log_dirs=[tmp_path / name], replica_lag_time_max_ms=10_000)
        rm = ReplicaManager(config, ZkClient("127.0.0.1:1"), Registry(), clock=clock)
        part = rm.become_leader("t", 0, [1, 2, 3], 0, [1, 2], 0, 1, 1, None)
        part.log.truncate_fully_and_start_at(5)
        rm.append(part, records(10, base=5), acks=1, config=ValidationConfig(1 << 20))
        return rm, part, clock

    def state(rm: ReplicaManager, part: Partition) -> tuple[Any, ...]:
        assert part.tracker is not None
        return (part.high_watermark, [(b, vars(p)) for b, p in sorted(part.tracker.followers.items())],
                len(rm._tasks))

    one, one_part, one_clock = fresh("one")
    two, two_part, two_clock = fresh("two")
    # (replica id, fetch offset): out of range both ways, the leader itself, a stranger, assigned
    # followers in and out of the ISR at and below the log end, repeated (an idle partition).
    steps = [(2, 4), (2, 16), (1, 15), (7, 15), (2, 9), (3, 12), (2, 15), (3, 15), (3, 15), (2, 15)]
    for i, (replica_id, offset) in enumerate(steps):
        one_clock.now = two_clock.now = 1000.0 * (i + 1)
        record = i % 3 != 2  # some passes only check (a long poll's re-reads)
        answer = two.check_follower_fetch(two_part, replica_id, offset)
        if record and answer == "ok":
            two.record_follower_fetch(two_part, replica_id, offset, checked=True)
        assert one.follower_fetch(one_part, replica_id, offset, record=record, now_ms=one_clock.now) == answer
        assert state(one, one_part) == state(two, two_part), (replica_id, offset)
    assert one_part.high_watermark == 15
    assert len(one._tasks) == 1  # follower 3 reached the high watermark: one ISR expansion started
    for task in one._tasks + two._tasks:  # (its ZooKeeper write has no server here)
        task.cancel()
    await asyncio.gather(*one._tasks, *two._tasks, return_exceptions=True)
