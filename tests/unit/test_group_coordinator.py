"""broker/group/coordinator.py: the machine on a real event loop (timers, futures, the store's writes).

The store is an in-memory stand-in for `__consumer_offsets` (this module's only mock): it keeps
the last record per key, as a compacted log replays, so a second coordinator can load from it
the way a new leader does after a failover.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from broker.config import build_config
from broker.group.coordinator import GroupCoordinator, LoopTimers, group_config
from broker.group.machine import GroupConfig
from broker.group.store import KEEP_GROUP, CommittedOffset, GroupRecord, TopicPartition, _Keep, partition_for
from protocol.consumer_protocol import encode_assignment, encode_subscription
from protocol.errors import ErrorCode

PARTITIONS = 3
FAST = GroupConfig(initial_rebalance_delay_ms=50, min_session_timeout_ms=100)


class MemoryStore:
    def __init__(self, delay_s: float = 0.0, error: int = ErrorCode.NONE) -> None:
        self.groups: dict[str, GroupRecord] = {}
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.order: list[tuple[str, object]] = []
        self.delay_s = delay_s
        self.error = error

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, PARTITIONS)

    async def write(self, group_id: str, group: GroupRecord | None | _Keep,
                    offsets: Mapping[TopicPartition, CommittedOffset | None]) -> int:
        self.order.append((group_id, group))  # appended at call time, in call order
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.error != ErrorCode.NONE:
            return self.error
        if group is None:
            self.groups.pop(group_id, None)
        elif not isinstance(group, _Keep):
            self.groups[group_id] = group
        for tp, value in offsets.items():
            if value is None:
                self.offsets.get(group_id, {}).pop(tp, None)
            else:
                self.offsets.setdefault(group_id, {})[tp] = value
        return ErrorCode.NONE

    def load_into(self, coordinator: GroupCoordinator) -> None:
        for p in range(PARTITIONS):
            coordinator.partition_loading(p)
            coordinator.partition_loaded(
                p, {g: r for g, r in self.groups.items() if self.partition_for(g) == p},
                {g: o for g, o in self.offsets.items() if self.partition_for(g) == p})


def _coordinator(store: MemoryStore, config: GroupConfig = FAST) -> GroupCoordinator:
    coordinator = GroupCoordinator(1, config)
    coordinator.bind_store(store)
    coordinator.start()
    store.load_into(coordinator)
    return coordinator


async def _join(c: GroupCoordinator, member_id: str = '', instance: str | None = None):  # noqa: ANN202
    return await c.join_group('g', member_id, instance, instance is None, 'cli', '/127.0.0.1', 2000, 500,
                              'consumer', [('range', encode_subscription(['t']))])


def test_a_group_forms_commits_and_a_new_coordinator_loads_it_from_the_store() -> None:
    async def scenario() -> None:
        store = MemoryStore(delay_s=0.01)
        c = _coordinator(store)
        first = await asyncio.gather(_join(c), _join(c))
        assert [r.error for r in first] == [ErrorCode.MEMBER_ID_REQUIRED] * 2
        a, b = await asyncio.gather(*(_join(c, r.member_id) for r in first))
        assert a.generation_id == b.generation_id == 1
        leader, other = (a, b) if a.members else (b, a)
        plan = {leader.member_id: encode_assignment({'t': [0]}), other.member_id: encode_assignment({'t': [1]})}
        synced = await asyncio.gather(
            c.sync_group('g', 1, leader.member_id, 'consumer', 'range', None, plan),
            c.sync_group('g', 1, other.member_id, 'consumer', 'range', None, {}))
        assert [s.assignment for s in synced] == [plan[leader.member_id], plan[other.member_id]]
        assert c.heartbeat('g', other.member_id, None, 1) == ErrorCode.NONE
        committed = await c.commit_offsets('g', other.member_id, None, 1, {('t', 1): (41, 3, 'm', -1)})
        assert committed == {('t', 1): ErrorCode.NONE}
        assert store.offsets['g'][('t', 1)].offset == 41
        await c.stop()

        # The partition moves to another broker: it loads the group and the offsets.
        c2 = _coordinator(store)
        error, fetched = c2.fetch_offsets('g', True, [('t', 1)])
        assert error == ErrorCode.NONE and (fetched[('t', 1)].offset, fetched[('t', 1)].leader_epoch) == (41, 3)
        assert c2.describe_group('g')[1]['group_state'] == 'Stable'
        assert c2.heartbeat('g', other.member_id, None, 1) == ErrorCode.NONE
        back = await c2.sync_group('g', 1, other.member_id, 'consumer', 'range', None, {})
        assert back.assignment == plan[other.member_id]
        await c2.stop()

    asyncio.run(scenario())


def test_session_expiry_runs_on_the_loop_timers() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        c = _coordinator(store)
        ids = await asyncio.gather(_join(c), _join(c))
        a, b = await asyncio.gather(*(_join(c, r.member_id) for r in ids))
        leader, other = (a, b) if a.members else (b, a)
        await asyncio.gather(c.sync_group('g', 1, leader.member_id, None, None, None, {}),
                             c.sync_group('g', 1, other.member_id, None, None, None, {}))
        for _ in range(8):  # the leader heartbeats for 800 ms; `other` (session 500 ms) does not
            await asyncio.sleep(0.1)
            c.heartbeat('g', leader.member_id, None, 1)
        assert c.heartbeat('g', leader.member_id, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        again = await _join(c, leader.member_id)
        assert again.generation_id == 2 and [m[0] for m in again.members] == [leader.member_id]
        await c.stop()
        assert len(c.timers) == 0

    asyncio.run(scenario())


def test_writes_start_in_the_order_the_machine_asks_and_store_errors_map() -> None:
    async def scenario() -> None:
        store = MemoryStore(delay_s=0.02)
        c = _coordinator(store)
        results = await asyncio.gather(*(c.commit_offsets('s', '', None, -1, {('t', 0): (n, -1, None, -1)})
                                         for n in range(5)))
        assert all(r == {('t', 0): ErrorCode.NONE} for r in results)
        assert [g for g, _ in store.order] == ['s'] * 5 and all(r is KEEP_GROUP for _, r in store.order)
        assert c.fetch_offsets('s', False, [('t', 0)])[1][('t', 0)].offset == 4
        store.error = ErrorCode.NOT_LEADER_FOR_PARTITION
        assert await c.commit_offsets('s', '', None, -1, {('t', 0): (9, -1, None, -1)}) == {
            ('t', 0): ErrorCode.NOT_COORDINATOR}
        await c.stop()

    asyncio.run(scenario())


def test_without_a_store_every_group_is_not_coordinated_here() -> None:
    async def scenario() -> None:
        c = GroupCoordinator(1, FAST)
        c.start()
        assert (await _join(c)).error == ErrorCode.NOT_COORDINATOR
        assert c.fetch_offsets('g', False, None)[0] == ErrorCode.NOT_COORDINATOR
        await c.stop()

    asyncio.run(scenario())


def test_loop_timers_replace_by_key_and_cancel() -> None:
    async def scenario() -> None:
        timers, fired = LoopTimers(), []
        timers.schedule('k', 30, lambda: fired.append(1))
        timers.schedule('k', 10, lambda: fired.append(2))
        timers.schedule('x', 10, lambda: fired.append(3))
        timers.cancel('x')
        await asyncio.sleep(0.06)
        assert fired == [2] and len(timers) == 0

    asyncio.run(scenario())


def test_group_config_reads_kafkas_keys() -> None:
    cfg = group_config(build_config({'broker.id': '1', 'group.initial.rebalance.delay.ms': '0',
                                     'offsets.retention.minutes': '2', 'group.max.size': '5'}))
    assert (cfg.initial_rebalance_delay_ms, cfg.offsets_retention_ms, cfg.max_size) == (0, 120_000, 5)
    assert group_config(build_config({'broker.id': '1'})) == GroupConfig()
