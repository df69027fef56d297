"""broker/group/machine.py, Kafka 2.8's GroupCoordinator rules, driven in simulated time.

A fake clock and timer wheel stand in for the event loop, a fake store records the writes to
`__consumer_offsets` and answers them when told (or at once). Scenarios follow Kafka's
GroupCoordinatorTest where one exists.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

import pytest

from broker.group.machine import GroupConfig, GroupMachine, LeaveMember
from broker.group.membership import GroupState, JoinResult, SyncResult
from broker.group.store import KEEP_GROUP, CommittedOffset, GroupRecord, MemberRecord, TopicPartition
from protocol.consumer_protocol import encode_assignment, encode_subscription
from protocol.errors import ErrorCode as E

GROUP = 'g1'
PARTITIONS = 4
SESSION = 10_000
REBALANCE = 30_000


class SimTimers:
    """One-shot timers on a simulated clock."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self.timers: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}
        self._seq = 0

    def schedule(self, key: Hashable, delay_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        self.timers[key] = (self.now + delay_ms, self._seq, action)

    def cancel(self, key: Hashable) -> None:
        self.timers.pop(key, None)

    def advance(self, ms: int) -> None:
        until = self.now + ms
        while True:
            due = [(deadline, seq, key) for key, (deadline, seq, _) in self.timers.items() if deadline <= until]
            if not due:
                break
            deadline, _, key = min(due)
            self.now = deadline
            action = self.timers.pop(key)[2]
            action()
        self.now = until


@dataclass
class Write:
    group_id: str
    group: object
    offsets: Mapping[TopicPartition, CommittedOffset | None]
    callback: Callable[[int], None]


@dataclass
class SimStore:
    auto: int | None = E.NONE  # answer every write at once with this code; None: hold them
    writes: list[Write] = field(default_factory=list)
    held: list[Write] = field(default_factory=list)

    def write(self, group_id: str, group: object, offsets: Mapping[TopicPartition, CommittedOffset | None],
              callback: Callable[[int], None]) -> None:
        w = Write(group_id, group, dict(offsets), callback)
        self.writes.append(w)
        if self.auto is None:
            self.held.append(w)
        else:
            callback(self.auto)

    def complete(self, code: int = E.NONE) -> None:
        held, self.held = self.held, []
        for w in held:
            w.callback(code)


class Harness:
    def __init__(self, config: GroupConfig | None = None, owned: bool = True) -> None:
        self.timers = SimTimers()
        self.store = SimStore()
        self.machine = GroupMachine(1, config or GroupConfig(), lambda: self.timers.now, self.timers,
                                    self.store.write, lambda g: hash(g) % PARTITIONS)
        self.machine.startup()
        if owned:
            for p in range(PARTITIONS):
                self.machine.partition_loading(p)
                self.machine.partition_loaded(p, {}, {})

    def join(self, member_id: str = '', instance: str | None = None, require_known: bool = False,
             session: int = SESSION, rebalance: int = REBALANCE, protocols: list[tuple[str, bytes]] | None = None,
             protocol_type: str = 'consumer', group: str = GROUP) -> list[JoinResult]:
        out: list[JoinResult] = []
        self.machine.handle_join_group(group, member_id, instance, require_known, 'client', '/127.0.0.1',
                                       rebalance, session, protocol_type,
                                       protocols if protocols is not None else [('range', SUB)], out.append)
        return out

    def sync(self, member_id: str, generation: int, assignment: dict[str, bytes] | None = None,
             instance: str | None = None) -> list[SyncResult]:
        out: list[SyncResult] = []
        self.machine.handle_sync_group(GROUP, generation, member_id, 'consumer', 'range', instance,
                                       assignment or {}, out.append)
        return out

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> int:
        return self.machine.handle_heartbeat(GROUP, member_id, instance, generation)

    def commit(self, member_id: str, generation: int, offsets: dict[TopicPartition, CommittedOffset],
               group: str = GROUP) -> list[dict[TopicPartition, int]]:
        out: list[dict[TopicPartition, int]] = []
        self.machine.handle_commit_offsets(group, member_id, None, generation, offsets, out.append)
        return out

    def state(self, group: str = GROUP) -> GroupState:
        return self.machine.groups[group].state

    def stable_pair(self) -> tuple[str, str, int]:
        """Two dynamic members in a Stable group; returns the leader's id, the other's, the generation."""
        a, b = self.join(), self.join()
        self.timers.advance(6000)  # b arrived within the initial delay: one more delay
        leader, other = (a[0], b[0]) if a[0].members else (b[0], a[0])
        gen = leader.generation_id
        assign = {leader.member_id: ASSIGN_A, other.member_id: ASSIGN_B}
        assert self.sync(leader.member_id, gen, assign)[0].error == E.NONE
        assert self.sync(other.member_id, gen)[0].assignment == ASSIGN_B
        assert self.state() is GroupState.STABLE
        return leader.member_id, other.member_id, gen


def instance_of(member_id: str) -> str:
    """A static member's id is `<group.instance.id>-<uuid>`; these tests' instance ids are `i-x`."""
    return '-'.join(member_id.split('-')[:2])


SUB = encode_subscription(['t1'])
ASSIGN_A = encode_assignment({'t1': [0, 1, 2]})
ASSIGN_B = encode_assignment({'t1': [3, 4, 5]})


def offset(value: int, metadata: str = '', now: int = 1_000_000, expire: int | None = None) -> CommittedOffset:
    return CommittedOffset(value, -1, metadata, now, expire)


# ---- joining ---------------------------------------------------------------------------------


def test_first_join_waits_the_initial_rebalance_delay_then_elects_the_leader() -> None:
    h = Harness()
    a = h.join()
    assert a == []  # held in the delayed join
    assert h.state() is GroupState.PREPARING_REBALANCE
    h.timers.advance(2999)
    assert a == []
    h.timers.advance(1)
    assert len(a) == 1 and a[0].error == E.NONE and a[0].generation_id == 1
    assert a[0].leader_id == a[0].member_id and a[0].protocol_name == 'range'
    assert a[0].members == [(a[0].member_id, None, SUB)]
    assert a[0].member_id.startswith('client-')
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_initial_delay_extends_while_members_arrive_up_to_the_rebalance_timeout() -> None:
    # InitialDelayedJoin(delay 3000, remaining 10000-3000); a member arriving within a delay adds
    # min(3000, remaining) once more; remaining shrinks by the delay each time.
    h = Harness()
    a = h.join(rebalance=10_000)
    h.timers.advance(1000)
    b = h.join(rebalance=10_000)
    h.timers.advance(2000)  # t=3000: a member arrived, wait again (delay 3000, remaining 4000)
    assert a == [] and b == []
    h.timers.advance(1000)
    c = h.join(rebalance=10_000)  # t=4000: arrives in the second delay
    h.timers.advance(1999)  # t=5999
    assert a == [] and c == []
    h.timers.advance(1)  # t=6000: c arrived, wait again (delay 3000, remaining 1000)
    assert a == []
    h.timers.advance(3000)  # t=9000: nobody new: complete
    assert [len(a), len(b), len(c)] == [1, 1, 1]
    assert {r.generation_id for r in a + b + c} == {1}
    leader = next(r for r in a + b + c if r.members)
    assert len(leader.members) == 3


def test_initial_delay_never_passes_the_rebalance_timeout() -> None:
    h = Harness()
    first = h.join(rebalance=4000)  # delay 3000, remaining 1000
    h.timers.advance(500)
    h.join(rebalance=4000)
    h.timers.advance(2500)  # t=3000: new member, next delay min(3000, 1000) = 1000
    assert first == []
    h.timers.advance(500)
    h.join(rebalance=4000)  # arrives; remaining is now 0: no further extension
    h.timers.advance(500)  # t=4000
    assert len(first) == 1 and len(first[0].members) == 3


def test_member_id_required_then_join_with_the_given_id() -> None:
    h = Harness()
    first = h.join(require_known=True)
    assert first[0].error == E.MEMBER_ID_REQUIRED and first[0].member_id
    member_id = first[0].member_id
    assert h.state() is GroupState.EMPTY  # a pending member does not start a rebalance
    second = h.join(member_id=member_id, require_known=True)
    assert second == []
    h.timers.advance(3000)
    assert second[0].error == E.NONE and second[0].member_id == member_id


def test_a_pending_member_that_never_rejoins_expires_after_its_session_timeout() -> None:
    h = Harness()
    a = h.join()  # group PreparingRebalance (initial delay)
    pending = h.join(require_known=True)[0].member_id
    assert pending in h.machine.groups[GROUP].pending_members
    h.timers.advance(3000)  # the initial delay ends; the pending member blocks nothing
    assert len(a) == 1
    h.timers.advance(SESSION)
    assert pending not in h.machine.groups[GROUP].pending_members
    assert h.join(member_id=pending)[0].error == E.UNKNOWN_MEMBER_ID


def test_session_timeout_bounds_and_protocol_checks() -> None:
    h = Harness()
    assert h.join(session=5999)[0].error == E.INVALID_SESSION_TIMEOUT
    assert h.join(session=1_800_001)[0].error == E.INVALID_SESSION_TIMEOUT
    assert h.join(protocol_type='')[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocols=[])[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    h.join()
    assert h.join(protocol_type='connect')[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocols=[('roundrobin', SUB)])[0].error == E.INCONSISTENT_GROUP_PROTOCOL


def test_group_id_rules_and_ownership() -> None:
    h = Harness()
    assert h.join(group='')[0].error == E.INVALID_GROUP_ID
    assert h.commit('', -1, {('t', 0): offset(1)}, group='') == [{('t', 0): E.NONE}]  # allowed for commits
    unowned = Harness(owned=False)
    assert unowned.join()[0].error == E.NOT_COORDINATOR
    unowned.machine.partition_loading(hash(GROUP) % PARTITIONS)
    assert unowned.join()[0].error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert unowned.heartbeat('m', 1) == E.NONE  # heartbeats are answered blindly while loading
    assert unowned.sync('m', 1)[0].error == E.REBALANCE_IN_PROGRESS
    inactive = Harness()
    inactive.machine.active = False
    assert inactive.join()[0].error == E.COORDINATOR_NOT_AVAILABLE


def test_unknown_member_id_on_a_missing_group() -> None:
    h = Harness()
    assert h.join(member_id='nobody')[0].error == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat('nobody', 1) == E.UNKNOWN_MEMBER_ID
    assert h.sync('nobody', 1)[0].error == E.UNKNOWN_MEMBER_ID


def test_a_protocol_named_twice_counts_once() -> None:
    h = Harness()
    a = h.join(protocols=[('range', SUB), ('range', b'other'), ('roundrobin', SUB)])
    h.timers.advance(3000)
    assert a[0].error == E.NONE and a[0].protocol_name == 'range' and a[0].members[0][2] == SUB


def test_a_stored_group_with_members_but_no_protocol_loads_empty() -> None:
    h = Harness(owned=False)
    partition = hash(GROUP) % PARTITIONS
    member = MemberRecord('m-1', None, 'c', '/h', REBALANCE, SESSION, SUB, ASSIGN_A)
    h.machine.partition_loading(partition)
    h.machine.partition_loaded(partition, {GROUP: GroupRecord('consumer', 3, None, 'm-1', 5, (member,))}, {})
    assert h.state() is GroupState.EMPTY and h.machine.groups[GROUP].generation_id == 3
    assert h.machine.handle_describe_group(GROUP)[1]['members'] == []


def test_group_max_size() -> None:
    h = Harness(GroupConfig(max_size=1))
    h.join()
    refused = h.join()
    assert refused[0].error == E.GROUP_MAX_SIZE_REACHED and refused[0].member_id == ''


# ---- sync, heartbeat, generations -------------------------------------------------------------


def test_sync_hands_out_the_leaders_assignment_after_the_store_acknowledges() -> None:
    h = Harness()
    a, b = h.join(), h.join()
    h.timers.advance(6000)
    leader, follower = (a[0], b[0]) if a[0].members else (b[0], a[0])
    assert follower.members == [] and follower.leader_id == leader.member_id
    h.store.auto = None
    waiting = h.sync(follower.member_id, follower.generation_id)
    assert waiting == []
    done = h.sync(leader.member_id, leader.generation_id, {leader.member_id: ASSIGN_A,
                                                          follower.member_id: ASSIGN_B})
    assert done == [] and waiting == []  # nothing before the group record is written
    record = h.store.held[0].group
    assert isinstance(record, GroupRecord) and record.generation == 1 and len(record.members) == 2
    assert {m.member_id: m.assignment for m in record.members} == {leader.member_id: ASSIGN_A,
                                                                   follower.member_id: ASSIGN_B}
    h.store.complete()
    assert done[0].assignment == ASSIGN_A and waiting[0].assignment == ASSIGN_B
    assert waiting[0].protocol_type == 'consumer' and waiting[0].protocol_name == 'range'
    assert h.state() is GroupState.STABLE
    assert h.machine.completed_rebalances[GROUP] == 1


def test_a_failed_group_write_answers_the_sync_and_rebalances() -> None:
    h = Harness()
    a = h.join()
    h.timers.advance(3000)
    h.store.auto = E.REQUEST_TIMED_OUT
    result = h.sync(a[0].member_id, 1, {a[0].member_id: ASSIGN_A})
    assert result[0].error == E.REBALANCE_IN_PROGRESS  # storeGroup's mapping of REQUEST_TIMED_OUT
    assert h.state() is GroupState.PREPARING_REBALANCE


@pytest.mark.parametrize(('store_error', 'answer'), [
    (E.NOT_LEADER_FOR_PARTITION, E.NOT_COORDINATOR), (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE), (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR)])
def test_group_write_errors_map_as_group_metadata_manager(store_error: int, answer: int) -> None:
    h = Harness()
    a = h.join()
    h.timers.advance(3000)
    h.store.auto = store_error
    assert h.sync(a[0].member_id, 1, {a[0].member_id: ASSIGN_A})[0].error == answer


def test_generation_and_member_checks() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    assert h.heartbeat(other, gen) == E.NONE
    assert h.heartbeat(other, gen + 1) == E.ILLEGAL_GENERATION
    assert h.heartbeat('stranger', gen) == E.UNKNOWN_MEMBER_ID
    assert h.sync(other, gen - 1)[0].error == E.ILLEGAL_GENERATION
    assert h.commit(other, gen + 7, {('t1', 0): offset(5)}) == [{('t1', 0): E.ILLEGAL_GENERATION}]
    assert h.commit('stranger', gen, {('t1', 0): offset(5)}) == [{('t1', 0): E.UNKNOWN_MEMBER_ID}]
    wrong_protocol: list[SyncResult] = []
    h.machine.handle_sync_group(GROUP, gen, other, 'consumer', 'roundrobin', None, {}, wrong_protocol.append)
    assert wrong_protocol[0].error == E.INCONSISTENT_GROUP_PROTOCOL


def test_follower_rejoining_unchanged_in_a_stable_group_gets_the_current_generation() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    again = h.join(member_id=other)
    assert again[0].error == E.NONE and again[0].generation_id == gen and again[0].members == []
    assert h.state() is GroupState.STABLE


def test_leader_rejoining_forces_a_rebalance() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    lj = h.join(member_id=leader)
    assert lj == [] and h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(other, gen) == E.REBALANCE_IN_PROGRESS
    oj = h.join(member_id=other)  # everyone is in: the join completes at once
    assert lj[0].generation_id == gen + 1 and oj[0].generation_id == gen + 1
    assert h.state() is GroupState.COMPLETING_REBALANCE
    # A commit between JoinGroup and SyncGroup: REBALANCE_IN_PROGRESS.
    assert h.commit(other, gen + 1, {('t1', 0): offset(1)}) == [{('t1', 0): E.REBALANCE_IN_PROGRESS}]


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    h.timers.advance(SESSION // 2)
    assert h.heartbeat(leader, gen) == E.NONE  # the leader heartbeats; `other` is silent
    h.timers.advance(SESSION // 2 - 1)
    assert other in h.machine.groups[GROUP].members
    h.timers.advance(1)
    assert other not in h.machine.groups[GROUP].members
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(leader, gen) == E.REBALANCE_IN_PROGRESS
    rejoin = h.join(member_id=leader)
    assert rejoin[0].generation_id == gen + 1 and [m[0] for m in rejoin[0].members] == [leader]


def test_members_not_rejoining_within_the_rebalance_timeout_are_dropped() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    lj = h.join(member_id=leader)
    for _ in range(REBALANCE // 5000):
        h.timers.advance(5000)
        if not lj:
            h.heartbeat(other, gen)  # alive, but never rejoins
    assert lj[0].error == E.NONE and lj[0].generation_id == gen + 1
    assert list(h.machine.groups[GROUP].members) == [leader]


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    long_session = REBALANCE + 10_000  # the sync deadline, not the session, must remove it
    a, b = h.join(session=long_session), h.join(session=long_session)
    h.timers.advance(6000)
    leader = a[0] if a[0].members else b[0]
    follower = b[0] if leader is a[0] else a[0]
    assert h.sync(leader.member_id, 1, {leader.member_id: ASSIGN_A, follower.member_id: ASSIGN_B})[0].error == E.NONE
    h.timers.advance(REBALANCE - 1)
    assert follower.member_id in h.machine.groups[GROUP].members
    assert h.heartbeat(leader.member_id, 1) == E.NONE
    h.timers.advance(1)
    assert follower.member_id not in h.machine.groups[GROUP].members
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_leave_group_rebalances_and_reports_unknown_members() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    error, members = h.machine.handle_leave_group(GROUP, [LeaveMember(other, None), LeaveMember('ghost', None)])
    assert error == E.NONE and [code for _, code in members] == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert h.state() is GroupState.PREPARING_REBALANCE
    rejoin = h.join(member_id=leader)
    assert rejoin[0].generation_id == gen + 1 and len(rejoin[0].members) == 1
    assert h.machine.handle_leave_group('nogroup', [LeaveMember('x', None)])[1][0][1] == E.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group_and_writes_the_empty_record() -> None:
    h = Harness()
    a = h.join()
    h.timers.advance(3000)
    h.sync(a[0].member_id, 1, {a[0].member_id: ASSIGN_A})
    h.machine.handle_leave_group(GROUP, [LeaveMember(a[0].member_id, None)])
    # The rebalance has nobody to wait for: it completes at once, into Empty.
    assert h.state() is GroupState.EMPTY
    last = h.store.writes[-1].group
    assert isinstance(last, GroupRecord) and last.members == () and last.generation == 2


# ---- static membership ---------------------------------------------------------------------


def _static_pair(h: Harness) -> tuple[JoinResult, JoinResult]:
    a = h.join(instance='i-a')
    b = h.join(instance='i-b')
    h.timers.advance(6000)
    leader, follower = (a[0], b[0]) if a[0].members else (b[0], a[0])
    h.sync(leader.member_id, 1, {leader.member_id: ASSIGN_A, follower.member_id: ASSIGN_B})
    h.sync(follower.member_id, 1)
    return leader, follower


def test_static_member_restarting_gets_its_assignment_back_without_a_rebalance() -> None:
    h = Harness()
    leader, follower = _static_pair(h)
    instance = instance_of(follower.member_id)
    writes = len(h.store.writes)
    back = h.join(instance=instance)  # a restarted process: unknown member id, same instance id
    assert back[0].error == E.NONE and back[0].generation_id == 1
    assert back[0].member_id != follower.member_id and back[0].leader_id == leader.member_id
    assert h.state() is GroupState.STABLE
    assert len(h.store.writes) == writes + 1  # the new member id is persisted
    assert h.sync(back[0].member_id, 1, instance=instance)[0].assignment == ASSIGN_B
    # The old incarnation is fenced.
    assert h.heartbeat(follower.member_id, 1, instance=instance) == E.FENCED_INSTANCE_ID
    assert h.join(member_id=follower.member_id, instance=instance)[0].error == E.FENCED_INSTANCE_ID


def test_static_member_rejoin_store_failure_reverts_to_the_old_member_id() -> None:
    h = Harness()
    leader, follower = _static_pair(h)
    instance = instance_of(follower.member_id)
    h.store.auto = E.NOT_LEADER_FOR_PARTITION
    back = h.join(instance=instance)
    assert back[0].error == E.NOT_COORDINATOR and back[0].member_id == ''
    assert h.machine.groups[GROUP].static_members[instance] == follower.member_id


def test_static_member_is_kept_across_a_rebalance_it_misses() -> None:
    h = Harness()
    leader, follower = _static_pair(h)
    lj = h.join(member_id=leader.member_id, instance=instance_of(leader.member_id))
    while not lj:
        h.timers.advance(5000)
        h.heartbeat(follower.member_id, 1, instance=instance_of(follower.member_id))  # alive, does not rejoin
    assert lj[0].error == E.NONE and lj[0].generation_id == 2
    # A dynamic member would be dropped here; a static one stays until its session ends.
    assert follower.member_id in h.machine.groups[GROUP].members


# ---- offsets ---------------------------------------------------------------------------------


def test_simple_consumer_commits_with_generation_minus_one() -> None:
    h = Harness()
    assert h.commit('', -1, {('t1', 0): offset(42, 'meta')}) == [{('t1', 0): E.NONE}]
    assert h.state() is GroupState.EMPTY
    write = h.store.writes[-1]
    assert write.group is KEEP_GROUP and write.offsets == {('t1', 0): offset(42, 'meta')}
    error, fetched = h.machine.handle_fetch_offsets(GROUP, False, [('t1', 0), ('t1', 1)])
    assert error == E.NONE
    assert (fetched[('t1', 0)].offset, fetched[('t1', 0)].metadata) == (42, 'meta')
    assert fetched[('t1', 1)].offset == -1
    assert h.commit('', 3, {('t1', 0): offset(1)}, group='other') == [{('t1', 0): E.ILLEGAL_GENERATION}]


def test_commit_from_a_stable_member_and_fetch_of_all_partitions() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    assert h.commit(other, gen, {('t1', 3): offset(7), ('t1', 4): offset(9)}) == [
        {('t1', 3): E.NONE, ('t1', 4): E.NONE}]
    error, fetched = h.machine.handle_fetch_offsets(GROUP, True, None)
    assert error == E.NONE and {tp: f.offset for tp, f in fetched.items()} == {('t1', 3): 7, ('t1', 4): 9}


def test_offset_metadata_too_large_is_per_partition() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=10))
    result = h.commit('', -1, {('t1', 0): offset(1, 'x' * 11), ('t1', 1): offset(2, 'x' * 10)})
    assert result == [{('t1', 0): E.OFFSET_METADATA_TOO_LARGE, ('t1', 1): E.NONE}]
    assert list(h.store.writes[-1].offsets) == [('t1', 1)]
    assert h.commit('', -1, {('t1', 0): offset(1, 'x' * 11)}) == [{('t1', 0): E.OFFSET_METADATA_TOO_LARGE}]


@pytest.mark.parametrize(('store_error', 'answer'), [
    (E.NOT_LEADER_FOR_PARTITION, E.NOT_COORDINATOR), (E.REQUEST_TIMED_OUT, E.REQUEST_TIMED_OUT),
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE), (E.MESSAGE_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE)])
def test_offset_write_errors_map_as_group_metadata_manager(store_error: int, answer: int) -> None:
    h = Harness()
    h.store.auto = store_error
    assert h.commit('', -1, {('t1', 0): offset(1)}) == [{('t1', 0): answer}]
    assert h.machine.handle_fetch_offsets(GROUP, False, [('t1', 0)])[1][('t1', 0)].offset == -1


def test_require_stable_sees_a_pending_commit_as_unstable() -> None:
    h = Harness()
    h.store.auto = None
    h.commit('', -1, {('t1', 0): offset(5)})
    _, fetched = h.machine.handle_fetch_offsets(GROUP, True, [('t1', 0)])
    assert fetched[('t1', 0)].error == E.UNSTABLE_OFFSET_COMMIT
    _, unstable_ok = h.machine.handle_fetch_offsets(GROUP, False, [('t1', 0)])
    assert unstable_ok[('t1', 0)].error == E.NONE and unstable_ok[('t1', 0)].offset == -1
    h.store.complete()
    assert h.machine.handle_fetch_offsets(GROUP, True, [('t1', 0)])[1][('t1', 0)].offset == 5


def test_later_commit_wins_when_writes_complete_out_of_order() -> None:
    h = Harness()
    h.store.auto = None
    h.commit('', -1, {('t1', 0): offset(5)})
    h.commit('', -1, {('t1', 0): offset(6)})
    first, second = h.store.held
    h.store.held = []
    second.callback(E.NONE)
    first.callback(E.NONE)
    assert h.machine.handle_fetch_offsets(GROUP, False, [('t1', 0)])[1][('t1', 0)].offset == 6


# ---- expiry ----------------------------------------------------------------------------------

RETENTION = 60_000
CHECK = 10_000


def test_a_stable_consumer_group_keeps_offsets_of_subscribed_topics_only() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=RETENTION, offsets_retention_check_interval_ms=CHECK))
    leader, other, gen = h.stable_pair()
    h.commit(other, gen, {('t1', 0): offset(3, now=h.timers.now), ('old', 0): offset(4, now=h.timers.now)})
    for _ in range(2 * RETENTION // 5000):
        h.timers.advance(5000)
        assert h.heartbeat(leader, gen) == E.NONE and h.heartbeat(other, gen) == E.NONE
    _, fetched = h.machine.handle_fetch_offsets(GROUP, False, [('t1', 0), ('old', 0)])
    assert fetched[('t1', 0)].offset == 3 and fetched[('old', 0)].offset == -1


def test_empty_group_offsets_expire_then_the_group_is_removed_with_tombstones() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=RETENTION, offsets_retention_check_interval_ms=CHECK))
    a = h.join()
    h.timers.advance(3000)
    h.sync(a[0].member_id, 1, {a[0].member_id: ASSIGN_A})
    h.commit(a[0].member_id, 1, {('t1', 0): offset(3, now=h.timers.now)})
    h.machine.handle_leave_group(GROUP, [LeaveMember(a[0].member_id, None)])
    assert h.state() is GroupState.EMPTY
    emptied_at = h.timers.now
    h.timers.advance(RETENTION - CHECK)
    assert GROUP in h.machine.groups
    h.timers.advance(2 * CHECK)
    assert GROUP not in h.machine.groups
    tomb = h.store.writes[-1]
    assert tomb.group is None and tomb.offsets == {('t1', 0): None}
    assert h.timers.now - emptied_at >= RETENTION


def test_simple_consumer_offsets_expire_after_their_commit_and_respect_expire_timestamps() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=RETENTION, offsets_retention_check_interval_ms=CHECK))
    now = h.timers.now
    h.commit('', -1, {('t1', 0): offset(1, now=now), ('t1', 1): offset(2, now=now, expire=now + 5 * RETENTION)})
    h.timers.advance(RETENTION + CHECK)
    _, fetched = h.machine.handle_fetch_offsets(GROUP, False, [('t1', 0), ('t1', 1)])
    assert fetched[('t1', 0)].offset == -1 and fetched[('t1', 1)].offset == 2
    assert h.store.writes[-1].group is KEEP_GROUP  # generation 0: no group tombstone
    h.timers.advance(5 * RETENTION)
    assert GROUP not in h.machine.groups


# ---- DeleteGroups / OffsetDelete ---------------------------------------------------------------


def _delete(h: Harness, *ids: str) -> dict[str, int]:
    out: list[dict[str, int]] = []
    h.machine.handle_delete_groups(list(ids), out.append)
    return out[0]


def test_delete_groups() -> None:
    h = Harness()
    h.stable_pair()
    h.commit('', -1, {('t1', 0): offset(1)}, group='simple')
    assert _delete(h, GROUP, 'simple', 'absent') == {GROUP: E.NON_EMPTY_GROUP, 'simple': E.NONE,
                                                     'absent': E.GROUP_ID_NOT_FOUND}
    assert h.store.writes[-1].offsets == {('t1', 0): None}
    assert 'simple' not in h.machine.groups
    assert h.machine.handle_fetch_offsets('simple', False, [('t1', 0)])[1][('t1', 0)].offset == -1


def test_a_group_gone_leaves_no_rebalance_count_behind() -> None:
    # Deleted (or emptied and cleaned up) and unloaded groups take their group_rebalances_total
    # count with them: a stream of one-off group ids keeps nothing per id.
    h = Harness()
    h.stable_pair()
    assert h.machine.completed_rebalances[GROUP] >= 1
    h.machine.partition_unloaded(hash(GROUP) % PARTITIONS)
    assert GROUP not in h.machine.groups and GROUP not in h.machine.completed_rebalances
    d = Harness()
    leader, other, _ = d.stable_pair()
    assert d.machine.completed_rebalances[GROUP] >= 1
    d.machine.handle_leave_group(GROUP, [LeaveMember(leader, None), LeaveMember(other, None)])
    assert _delete(d, GROUP) == {GROUP: E.NONE}
    assert GROUP not in d.machine.groups and GROUP not in d.machine.completed_rebalances


def test_offset_delete_refuses_topics_a_live_consumer_group_subscribes_to() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    h.commit(other, gen, {('t1', 0): offset(1), ('t2', 0): offset(2)})
    out: list[tuple[int, dict[TopicPartition, int]]] = []
    h.machine.handle_delete_offsets(GROUP, [('t1', 0), ('t2', 0)], lambda e, p: out.append((e, p)))
    assert out == [(E.NONE, {('t1', 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ('t2', 0): E.NONE})]
    _, fetched = h.machine.handle_fetch_offsets(GROUP, False, [('t1', 0), ('t2', 0)])
    assert fetched[('t1', 0)].offset == 1 and fetched[('t2', 0)].offset == -1
    h.machine.handle_delete_offsets('absent', [('t1', 0)], lambda e, p: out.append((e, p)))
    assert out[-1] == (E.GROUP_ID_NOT_FOUND, {})


# ---- loading and unloading -------------------------------------------------------------------


def _record(members: tuple[MemberRecord, ...], generation: int = 4) -> GroupRecord:
    return GroupRecord('consumer', generation, 'range', members[0].member_id if members else None, 5, members)


def test_a_loaded_group_is_stable_and_its_members_must_heartbeat() -> None:
    h = Harness(owned=False)
    partition = hash(GROUP) % PARTITIONS
    members = (MemberRecord('m-1', None, 'c', '/h', REBALANCE, SESSION, SUB, ASSIGN_A),
               MemberRecord('m-2', 'inst', 'c', '/h', REBALANCE, SESSION, SUB, ASSIGN_B))
    h.machine.partition_loading(partition)
    assert h.heartbeat('m-1', 4) == E.NONE
    h.machine.partition_loaded(partition, {GROUP: _record(members)}, {GROUP: {('t1', 0): offset(77)}})
    assert h.state() is GroupState.STABLE
    assert h.sync('m-2', 4, instance='inst')[0].assignment == ASSIGN_B
    assert h.machine.handle_fetch_offsets(GROUP, False, [('t1', 0)])[1][('t1', 0)].offset == 77
    error, summary = h.machine.handle_describe_group(GROUP)
    assert error == E.NONE and summary['group_state'] == 'Stable' and len(summary['members']) == 2  # type: ignore[arg-type]
    h.timers.advance(SESSION // 2)
    assert h.heartbeat('m-1', 4) == E.NONE
    h.timers.advance(SESSION // 2 + 1)  # m-2 went silent
    assert list(h.machine.groups[GROUP].members) == ['m-1']
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_offsets_without_a_group_record_load_as_a_simple_consumer_group() -> None:
    h = Harness(owned=False)
    partition = hash('simple') % PARTITIONS
    h.machine.partition_loading(partition)
    h.machine.partition_loaded(partition, {}, {'simple': {('t', 0): offset(3)}})
    assert h.state('simple') is GroupState.EMPTY
    assert h.machine.handle_list_groups(set()) == (E.NONE, [('simple', '', 'Empty')])


def test_unloading_answers_waiting_joins_with_not_coordinator() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    waiting = h.join(member_id=leader)
    h.machine.partition_unloaded(hash(GROUP) % PARTITIONS)
    assert waiting[0].error == E.NOT_COORDINATOR
    assert GROUP not in h.machine.groups
    assert h.heartbeat(other, gen) == E.NOT_COORDINATOR
    assert not [k for k in h.timers.timers if k != ('expire',)]


def test_list_and_describe_groups() -> None:
    h = Harness()
    leader, other, gen = h.stable_pair()
    h.commit('', -1, {('t1', 0): offset(1)}, group='simple')
    assert sorted(h.machine.handle_list_groups(set())[1]) == [(GROUP, 'consumer', 'Stable'), ('simple', '', 'Empty')]
    assert h.machine.handle_list_groups({'Empty'})[1] == [('simple', '', 'Empty')]
    error, summary = h.machine.handle_describe_group(GROUP)
    members = summary['members']
    assert isinstance(members, list)
    assert summary['protocol_data'] == 'range'
    assert {m['member_id']: m['member_assignment'] for m in members} == {leader: ASSIGN_A, other: ASSIGN_B}
    assert h.machine.handle_describe_group('absent')[1]['group_state'] == 'Dead'
