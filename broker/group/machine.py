"""The group coordinator's rules: Kafka 2.8's GroupCoordinator (and the cache half of its
GroupMetadataManager), without I/O.

Everything that takes time or leaves the process is injected: the clock (`now_ms`), the timers
that stand in for Kafka's heartbeat and rebalance purgatories (`Timers`), and the durable
writes to `__consumer_offsets` (`write`, which calls back with the store's produce error code).
The asyncio shell (broker/group/coordinator.py) supplies event-loop timers and the real store;
tests supply a simulated clock and a store they complete by hand, so every rule below runs in
simulated time.

Purgatories as timers. Each of Kafka's delayed operations becomes one timer under a key:
`('heartbeat', group, member)` (DelayedHeartbeat, pending or not), `('join', group)`
(DelayedJoin / InitialDelayedJoin) and `('sync', group)` (DelayedSync). Kafka's
`checkAndComplete` is "cancel the timer if its completion condition now holds (and run the
completion)"; its `tryCompleteElseWatch` is "complete now or schedule". A delayed heartbeat
completing early does nothing in Kafka, so it is simply cancelled.

Departures from Kafka, each because the piece around it is absent or different here:
- The initial rebalance delay follows Kafka 2.8's InitialDelayedJoin exactly: each extension is
  `min(group.initial.rebalance.delay.ms, remaining)` while new members keep arriving, up to the
  rebalance timeout (it does not double).
- A committed offset's place in the log is the order in which this coordinator handed its write
  to the store (the store appends in call order), not the batch's base offset.
- A pending write's callback and DeleteGroups/OffsetDelete answer after the tombstones are
  written with acks=all (Kafka appends them with acks=0 and answers at once).
- Metadata above offset.metadata.max.bytes is measured in UTF-16 code units, as Java's
  `String.length` counts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from broker.group.membership import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    Protocols,
    SyncCallback,
    SyncResult,
)
from broker.group.store import KEEP_GROUP, CommittedOffset, GroupRecord, MemberRecord, TopicPartition, _Keep
from protocol.errors import ErrorCode

log = structlog.get_logger()

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # GroupCoordinator.NewMemberJoinTimeoutMs
UNKNOWN_MEMBER_ID = ''
NO_GENERATION = -1
INVALID_OFFSET = -1


@dataclass(frozen=True)
class GroupConfig:
    """The broker keys the coordinator obeys (KafkaConfig 2.8's names in the comments)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = (1 << 31) - 1  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes * 60000
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms


class Timers(Protocol):
    """One-shot timers by key; scheduling a key replaces its timer."""

    def schedule(self, key: Hashable, delay_ms: int, action: Callable[[], None]) -> None: ...

    def cancel(self, key: Hashable) -> None: ...


WriteCallback = Callable[[int], None]
Write = Callable[[str, 'GroupRecord | None | _Keep', Mapping[TopicPartition, 'CommittedOffset | None'],
                  WriteCallback], None]


class Api:
    """Which request asks (isValidGroupId lets the offset APIs and admin APIs use the empty id)."""

    JOIN_GROUP = 'JoinGroup'
    SYNC_GROUP = 'SyncGroup'
    HEARTBEAT = 'Heartbeat'
    LEAVE_GROUP = 'LeaveGroup'
    OFFSET_COMMIT = 'OffsetCommit'
    OFFSET_FETCH = 'OffsetFetch'
    DESCRIBE_GROUPS = 'DescribeGroups'
    DELETE_GROUPS = 'DeleteGroups'
    OFFSET_DELETE = 'OffsetDelete'


_EMPTY_ID_ALLOWED = frozenset({Api.OFFSET_COMMIT, Api.OFFSET_FETCH, Api.DESCRIBE_GROUPS, Api.DELETE_GROUPS})


@dataclass(frozen=True)
class FetchedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    error: int


@dataclass(frozen=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None


def _store_group_error(code: int) -> int:
    """GroupMetadataManager.storeGroup's mapping of an append error."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


def _store_offsets_error(code: int) -> int:
    """GroupMetadataManager.storeOffsets' mapping of an append error."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return code


@dataclass
class _JoinOp:
    """The group's delayed join: Kafka's DelayedJoin, or InitialDelayedJoin when `initial`."""

    initial: bool
    delay_ms: int
    remaining_ms: int = 0


class GroupMachine:
    """GroupCoordinator's decisions over the groups of the `__consumer_offsets` partitions this
    broker leads; also the GroupLoadListener the store tells about those partitions."""

    def __init__(self, broker_id: int, config: GroupConfig, now_ms: Callable[[], int], timers: Timers,
                 write: Write, partition_for: Callable[[str], int]) -> None:
        self.broker_id = broker_id
        self.config = config
        self.now_ms = now_ms
        self._timers = timers
        self._write = write
        self.partition_for = partition_for
        self.groups: dict[str, Group] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.active = False
        self._join_ops: dict[str, _JoinOp] = {}
        self._sync_ops: dict[str, int] = {}  # group -> generation awaited
        self._append_order = 0
        # Completed rebalances per group (GroupCoordinator's group-completed-rebalance count).
        self.completed_rebalances: dict[str, int] = {}

    # ---- lifecycle --------------------------------------------------------------------------

    def startup(self) -> None:
        self.active = True
        self._schedule_expiry()

    def shutdown(self) -> None:
        self.active = False
        self._timers.cancel(('expire',))
        for partition in list(self.owned | self.loading):
            self.partition_unloaded(partition)

    # ---- GroupLoadListener -----------------------------------------------------------------

    def partition_loading(self, partition: int) -> None:
        self.loading.add(partition)

    def partition_loaded(self, partition: int, groups: Mapping[str, GroupRecord],
                         offsets: Mapping[str, Mapping[TopicPartition, CommittedOffset]]) -> None:
        """GroupMetadataManager.doLoadGroupsAndOffsets' cache half, then onGroupLoaded."""
        now = self.now_ms()
        loaded: list[Group] = []
        for group_id in set(groups) | set(offsets):
            if group_id in self.groups:
                continue  # a group cached meanwhile wins (Kafka's addGroup)
            record = groups.get(group_id)
            group = _group_from_record(self.broker_id, group_id, record, now) if record is not None else Group(
                group_id, GroupState.EMPTY, now)
            group.initialize_offsets(offsets.get(group_id, {}))
            self.groups[group_id] = group
            loaded.append(group)
        self.loading.discard(partition)
        self.owned.add(partition)
        for group in loaded:
            if group.size > self.config.max_size:
                self._prepare_rebalance(group, 'freshly loaded group is over capacity')
            for member in list(group.members.values()):
                self._complete_and_schedule_next_heartbeat(group, member)
        log.info('group.partition_loaded', broker_id=self.broker_id, partition=partition, groups=len(loaded))

    def partition_unloaded(self, partition: int) -> None:
        self.owned.discard(partition)
        self.loading.discard(partition)
        removed = 0
        for group_id, group in list(self.groups.items()):
            if self.partition_for(group_id) == partition:
                self._on_group_unloaded(group)
                del self.groups[group_id]
                self.completed_rebalances.pop(group_id, None)  # a next coordinator counts from 0
                removed += 1
        log.info('group.partition_unloaded', broker_id=self.broker_id, partition=partition, groups=removed)

    def _on_group_unloaded(self, group: Group) -> None:
        previous = group.state
        group.transition_to(GroupState.DEAD, self.now_ms())
        if previous is GroupState.PREPARING_REBALANCE:
            for member in list(group.members.values()):
                group.maybe_invoke_join(member, JoinResult(member.member_id, ErrorCode.NOT_COORDINATOR))
        elif previous in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            for member in list(group.members.values()):
                group.maybe_invoke_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR))
        self._cancel_group_timers(group)

    def _cancel_group_timers(self, group: Group) -> None:
        for member_id in list(group.members) + list(group.pending_members):
            self._timers.cancel(('heartbeat', group.group_id, member_id))
        self._timers.cancel(('join', group.group_id))
        self._timers.cancel(('sync', group.group_id))
        self._join_ops.pop(group.group_id, None)
        self._sync_ops.pop(group.group_id, None)

    # ---- validation -------------------------------------------------------------------------

    def validate_group_status(self, group_id: str | None, api: str) -> int | None:
        if group_id is None or (group_id == '' and api not in _EMPTY_ID_ALLOWED):
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return None

    def _group_not_exists(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return self.partition_for(group_id) in self.owned and (group is None or group.is_(GroupState.DEAD))

    # ---- JoinGroup --------------------------------------------------------------------------

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            return (group.has(member_id) and group.get(member_id).awaiting_join is not None) or \
                group.num_awaiting_join < self.config.max_size
        return group.has(member_id) or group.size < self.config.max_size

    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                          protocols: Protocols, callback: JoinCallback) -> None:
        error = self.validate_group_status(group_id, Api.JOIN_GROUP)
        if error is not None:
            callback(JoinResult(member_id, error))
            return
        # A protocol named twice counts once (its first metadata): counted twice it would be a
        # protocol no group of one member could agree on, and the vote would find none.
        first: dict[str, bytes] = {}
        for name, meta in protocols:
            first.setdefault(name, meta)
        protocols = list(first.items())
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            callback(JoinResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not unknown:
                callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            group = self.groups[group_id] = Group(group_id, GroupState.EMPTY, self.now_ms())
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif unknown:
            self._do_unknown_join(group, group_instance_id, require_known_member_id, client_id, client_host,
                                  rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, callback)
        else:
            self._do_join(group, member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                          session_timeout_ms, protocol_type, protocols, callback)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._check_join(group)

    def _do_unknown_join(self, group: Group, group_instance_id: str | None, require_known_member_id: bool,
                         client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                         protocol_type: str, protocols: Protocols, callback: JoinCallback) -> None:
        if group.is_(GroupState.DEAD):
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        elif not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        else:
            new_member_id = Group.generate_member_id(client_id, group_instance_id)
            if group_instance_id is not None and group.has_static_member(group_instance_id):
                self._update_static_member_and_rebalance(group, new_member_id, group_instance_id, protocols, callback)
            elif require_known_member_id:
                group.pending_members.add(new_member_id)
                self._schedule_heartbeat(group, new_member_id, session_timeout_ms, pending=True)
                callback(JoinResult(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
            else:
                self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, new_member_id,
                                               group_instance_id, client_id, client_host, protocol_type, protocols,
                                               group, callback)

    def _do_join(self, group: Group, member_id: str, group_instance_id: str | None, client_id: str,
                 client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: Protocols, callback: JoinCallback) -> None:
        if group.is_(GroupState.DEAD):
            callback(JoinResult(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            callback(JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            # A pending member is never static (MEMBER_ID_REQUIRED is only for dynamic members).
            self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, member_id, group_instance_id,
                                           client_id, client_host, protocol_type, protocols, group, callback)
            return
        instance_not_found = group_instance_id is not None and not group.has_static_member(group_instance_id)
        if group.is_static_member_fenced(member_id, group_instance_id):
            callback(JoinResult(member_id, ErrorCode.FENCED_INSTANCE_ID))
            return
        if not group.has(member_id) or instance_not_found:
            callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, callback)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member lost its JoinGroup response: this generation's answer again.
                callback(self._join_result(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, protocols, callback)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining forces a rebalance (topic metadata changes reach the assignor).
                self._update_member_and_rebalance(group, member, protocols, callback)
            else:
                callback(self._join_result(group, member_id, with_members=False))
        else:
            callback(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _join_result(self, group: Group, member_id: str, with_members: bool) -> JoinResult:
        return JoinResult(member_id, ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or '', group.current_member_metadata() if with_members else [])

    def _add_member_and_rebalance(self, rebalance_timeout_ms: int, session_timeout_ms: int, member_id: str,
                                  group_instance_id: str | None, client_id: str, client_host: str,
                                  protocol_type: str, protocols: Protocols, group: Group,
                                  callback: JoinCallback) -> None:
        member = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # lets the initial delayed join wait once more
        group.add(member, callback)
        # A new member cannot heartbeat before its JoinGroup answer: its join is bounded instead.
        self._complete_and_schedule_next(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        if group_instance_id is not None:
            group.static_members[group_instance_id] = member_id
        else:
            group.pending_members.discard(member_id)
        self._maybe_prepare_rebalance(group, f'adding new member {member_id}')

    def _update_static_member_and_rebalance(self, group: Group, new_member_id: str, group_instance_id: str,
                                            protocols: Protocols, callback: JoinCallback) -> None:
        old_member_id = group.static_members[group_instance_id]
        current_leader = group.leader_id
        member = group.replace_group_instance(old_member_id, new_member_id, group_instance_id)
        self._timers.cancel(('heartbeat', group.group_id, old_member_id))
        self._complete_and_schedule_next_heartbeat(group, member)
        old_protocols = member.protocols
        group.update_member(member, protocols, callback)
        state = group.state
        if state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                # Nothing the assignment depends on changed: persist the new member id, no rebalance.
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                generation = group.generation_id

                def stored(code: int) -> None:
                    error = _store_group_error(code)
                    if error != ErrorCode.NONE:
                        log.warning('group.static_member_store_failed', broker_id=self.broker_id,
                                    group=group.group_id, error=ErrorCode.name_of(error))
                        group.update_member(member, old_protocols, None)
                        old = group.replace_group_instance(new_member_id, old_member_id, group_instance_id)
                        self._timers.cancel(('heartbeat', group.group_id, new_member_id))
                        self._complete_and_schedule_next_heartbeat(group, old)
                        callback(JoinResult(UNKNOWN_MEMBER_ID, error, generation, group.protocol_type,
                                            group.protocol_name, current_leader or ''))
                    else:
                        # The old leader id: the rejoined member must not think itself leader and
                        # assign in a Stable group (its assignment would never be sent out).
                        group.maybe_invoke_join(member, JoinResult(
                            new_member_id, ErrorCode.NONE, group.generation_id, group.protocol_type,
                            group.protocol_name, current_leader or ''))

                self._store_group(group, assignment, stored)
            else:
                self._maybe_prepare_rebalance(group, f'static member {group_instance_id} changed the protocol')
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may already have assigned to the old member id: rebalance again.
            self._prepare_rebalance(group, f'static member {group_instance_id} rejoined while completing')
        elif state is GroupState.PREPARING_REBALANCE:
            pass
        else:
            raise RuntimeError(f'group {group.group_id} in {state.value} with a known static member')

    def _update_member_and_rebalance(self, group: Group, member: Member, protocols: Protocols,
                                     callback: JoinCallback) -> None:
        group.update_member(member, protocols, callback)
        self._maybe_prepare_rebalance(group, f'member {member.member_id} rejoining')

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        if group.is_(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            op = _JoinOp(True, delay, max(group.rebalance_timeout_ms - delay, 0))
        else:
            op = _JoinOp(False, group.rebalance_timeout_ms)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.now_ms())
        log.info('group.preparing_rebalance', broker_id=self.broker_id, group=group.group_id,
                 generation=group.generation_id, reason=reason)
        self._watch_join(group, op)

    def _watch_join(self, group: Group, op: _JoinOp) -> None:
        """tryCompleteElseWatch of a DelayedJoin (an InitialDelayedJoin never completes early)."""
        if not op.initial and group.has_all_members_joined():
            self._on_complete_join(group)
            return
        self._join_ops[group.group_id] = op
        self._timers.schedule(('join', group.group_id), op.delay_ms, lambda: self._on_join_timer(group))

    def _check_join(self, group: Group) -> None:
        """rebalancePurgatory.checkAndComplete(GroupJoinKey)."""
        op = self._join_ops.get(group.group_id)
        if op is not None and not op.initial and group.has_all_members_joined():
            del self._join_ops[group.group_id]
            self._timers.cancel(('join', group.group_id))
            self._on_complete_join(group)

    def _on_join_timer(self, group: Group) -> None:
        op = self._join_ops.pop(group.group_id, None)
        if op is None or self.groups.get(group.group_id) is not group:
            return
        if op.initial and group.new_member_added and op.remaining_ms != 0:
            # InitialDelayedJoin.onComplete: members are still arriving, wait once more.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, op.remaining_ms)
            remaining = max(op.remaining_ms - op.delay_ms, 0)
            self._watch_join(group, _JoinOp(True, delay, remaining))
            return
        self._on_complete_join(group)

    def _on_complete_join(self, group: Group) -> None:
        for member in [m for m in group.not_yet_rejoined() if not m.is_static]:
            self._remove_heartbeat_for_leaving_member(group, member)
            group.remove(member.member_id)
        if group.is_(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout for the session timeouts to clear them.
            log.error('group.no_member_rejoined', broker_id=self.broker_id, group=group.group_id)
            self._watch_join(group, _JoinOp(False, group.rebalance_timeout_ms))
            return
        group.init_next_generation(self.now_ms())
        if group.is_(GroupState.EMPTY):
            log.info('group.empty', broker_id=self.broker_id, group=group.group_id, generation=group.generation_id)

            def stored(code: int) -> None:
                if code != ErrorCode.NONE:
                    log.warning('group.store_empty_failed', broker_id=self.broker_id, group=group.group_id,
                                error=ErrorCode.name_of(code))

            self._store_group(group, {}, stored)
            return
        log.info('group.stabilized', broker_id=self.broker_id, group=group.group_id,
                 generation=group.generation_id, members=group.size)
        for member in list(group.members.values()):
            group.maybe_invoke_join(member, self._join_result(group, member.member_id,
                                                              with_members=group.is_leader(member.member_id)))
            self._complete_and_schedule_next_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    # ---- SyncGroup --------------------------------------------------------------------------

    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                          protocol_name: str | None, group_instance_id: str | None,
                          assignment: Mapping[str, bytes], callback: SyncCallback) -> None:
        error = self.validate_group_status(group_id, Api.SYNC_GROUP)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance's state was lost with the load: start over at JoinGroup (older clients
            # do not expect COORDINATOR_LOAD_IN_PROGRESS here).
            callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            return
        if error is not None:
            callback(SyncResult(error))
            return
        group = self.groups.get(group_id)
        if group is None:
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.is_(GroupState.DEAD):
            callback(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        elif group.is_static_member_fenced(member_id, group_instance_id):
            callback(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        elif not group.has(member_id):
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif generation_id != group.generation_id:
            callback(SyncResult(ErrorCode.ILLEGAL_GENERATION))
        elif (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            callback(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        elif group.is_(GroupState.EMPTY):
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif group.is_(GroupState.PREPARING_REBALANCE):
            callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            group.get(member_id).awaiting_sync = callback
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                log.info('group.assignment_received', broker_id=self.broker_id, group=group.group_id,
                         generation=group.generation_id, members=group.size)
                full = {mid: assignment.get(mid, b'') for mid in group.members}
                generation = group.generation_id

                def stored(code: int) -> None:
                    # Another member may have joined meanwhile: act only on this generation.
                    if group.is_(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation:
                        error = _store_group_error(code)
                        if error != ErrorCode.NONE:
                            self._reset_and_propagate_assignment_error(group, error)
                            self._maybe_prepare_rebalance(group, 'error storing the group assignment')
                        else:
                            self._set_and_propagate_assignment(group, full)
                            group.transition_to(GroupState.STABLE, self.now_ms())

                self._store_group(group, full, stored)
                self.completed_rebalances[group.group_id] = self.completed_rebalances.get(group.group_id, 0) + 1
        else:  # Stable
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            callback(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self._complete_and_schedule_next_heartbeat(group, member)

    def _set_and_propagate_assignment(self, group: Group, assignment: Mapping[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b'')
        self._propagate_assignment(group, ErrorCode.NONE)

    def _reset_and_propagate_assignment_error(self, group: Group, error: int) -> None:
        for member in group.members.values():
            member.assignment = b''
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: int) -> None:
        ok = error == ErrorCode.NONE
        for member in list(group.members.values()):
            result = SyncResult(error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                                member.assignment)
            if group.maybe_invoke_sync(member, result):
                # A session that expired while waiting for the leader or the store starts again here.
                self._complete_and_schedule_next_heartbeat(group, member)

    def _schedule_pending_sync(self, group: Group) -> None:
        generation = group.generation_id
        if self._sync_complete(group, generation):
            return
        self._sync_ops[group.group_id] = generation
        self._timers.schedule(('sync', group.group_id), group.rebalance_timeout_ms,
                              lambda: self._on_sync_timer(group, generation))

    def _sync_complete(self, group: Group, generation: int) -> bool:
        """DelayedSync.tryComplete: nothing to wait for any more."""
        if generation != group.generation_id or group.state in (
                GroupState.DEAD, GroupState.EMPTY, GroupState.PREPARING_REBALANCE):
            return True
        return not group.pending_sync_members

    def _maybe_complete_sync_expiration(self, group: Group) -> None:
        generation = self._sync_ops.get(group.group_id)
        if generation is not None and self._sync_complete(group, generation):
            del self._sync_ops[group.group_id]
            self._timers.cancel(('sync', group.group_id))

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self._maybe_complete_sync_expiration(group)

    def _remove_sync_expiration(self, group: Group) -> None:
        group.pending_sync_members.clear()
        self._maybe_complete_sync_expiration(group)

    def _on_sync_timer(self, group: Group, generation: int) -> None:
        self._sync_ops.pop(group.group_id, None)
        if self.groups.get(group.group_id) is not group or generation != group.generation_id:
            return
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync_members:
            missing = sorted(group.pending_sync_members)
            for member_id in missing:
                self._remove_heartbeat_for_leaving_member(group, group.get(member_id))
                group.remove(member_id)
            self._prepare_rebalance(group, f'members {missing} sent no SyncGroup in time')

    # ---- Heartbeat --------------------------------------------------------------------------

    def handle_heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation_id: int) -> int:
        error = self.validate_group_status(group_id, Api.HEARTBEAT)
        if error is not None:
            # A group still loading answers blindly: its members carry on.
            return ErrorCode.NONE if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._complete_and_schedule_next_heartbeat(group, group.get(member_id))
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _complete_and_schedule_next_heartbeat(self, group: Group, member: Member) -> None:
        self._complete_and_schedule_next(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next(self, group: Group, member: Member, timeout_ms: int) -> None:
        member.heartbeat_satisfied = True
        self._timers.cancel(('heartbeat', group.group_id, member.member_id))
        member.heartbeat_satisfied = False
        self._schedule_heartbeat(group, member.member_id, timeout_ms, pending=False)

    def _schedule_heartbeat(self, group: Group, member_id: str, timeout_ms: int, pending: bool) -> None:
        self._timers.schedule(('heartbeat', group.group_id, member_id), timeout_ms,
                              lambda: self._on_expire_heartbeat(group, member_id, pending))

    def _remove_heartbeat_for_leaving_member(self, group: Group, member: Member) -> None:
        member.is_leaving = True
        self._timers.cancel(('heartbeat', group.group_id, member.member_id))

    def _on_expire_heartbeat(self, group: Group, member_id: str, pending: bool) -> None:
        if group.is_(GroupState.DEAD) or self.groups.get(group.group_id) is not group:
            return
        if pending:
            log.info('group.pending_member_expired', broker_id=self.broker_id, group=group.group_id,
                     member=member_id)
            self._remove_pending_member_and_update_group(group, member_id)
        elif group.has(member_id):
            member = group.get(member_id)
            if not member.has_satisfied_heartbeat():
                log.info('group.member_expired', broker_id=self.broker_id, group=group.group_id, member=member_id)
                self._remove_member_and_update_group(group, member, 'heartbeat expiration')

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        # A new member may time out with its JoinGroup still pending: answer it so it can retry.
        group.maybe_invoke_join(member, JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f'removing member {member.member_id} on {reason}')
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._check_join(group)

    def _remove_pending_member_and_update_group(self, group: Group, member_id: str) -> None:
        group.pending_members.discard(member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._check_join(group)

    # ---- LeaveGroup -------------------------------------------------------------------------

    def handle_leave_group(self, group_id: str, leaving: list[LeaveMember]) -> tuple[int, list[tuple[LeaveMember, int]]]:
        error = self.validate_group_status(group_id, Api.LEAVE_GROUP)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [(m, ErrorCode.UNKNOWN_MEMBER_ID) for m in leaving]
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        out: list[tuple[LeaveMember, int]] = []
        for leaver in leaving:
            member_id, instance_id = leaver.member_id, leaver.group_instance_id
            if member_id != UNKNOWN_MEMBER_ID and group.is_static_member_fenced(member_id, instance_id):
                out.append((leaver, ErrorCode.FENCED_INSTANCE_ID))
            elif group.is_pending_member(member_id):
                if instance_id is not None:
                    out.append((leaver, ErrorCode.UNKNOWN_MEMBER_ID))  # Kafka: an IllegalStateException
                    continue
                self._remove_pending_member_and_update_group(group, member_id)
                self._timers.cancel(('heartbeat', group.group_id, member_id))
                out.append((leaver, ErrorCode.NONE))
            elif not group.has(member_id) and not group.has_static_member(instance_id):
                out.append((leaver, ErrorCode.UNKNOWN_MEMBER_ID))
            else:
                target = group.get(group.static_members[instance_id]) if (
                    instance_id is not None and group.has_static_member(instance_id)) else group.get(member_id)
                self._remove_heartbeat_for_leaving_member(group, target)
                log.info('group.member_left', broker_id=self.broker_id, group=group.group_id,
                         member=target.member_id)
                self._remove_member_and_update_group(group, target, 'LeaveGroup')
                out.append((leaver, ErrorCode.NONE))
        return ErrorCode.NONE, out

    # ---- OffsetCommit / OffsetFetch ---------------------------------------------------------

    def handle_commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                              generation_id: int, offsets: Mapping[TopicPartition, CommittedOffset],
                              callback: Callable[[dict[TopicPartition, int]], None]) -> None:
        error = self.validate_group_status(group_id, Api.OFFSET_COMMIT)
        if error is not None:
            callback(dict.fromkeys(offsets, error))
            return
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                # A group that uses Kafka only to store offsets (a simple consumer).
                group = self.groups[group_id] = Group(group_id, GroupState.EMPTY, self.now_ms())
            else:
                callback(dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION))
                return
        if group.is_(GroupState.DEAD):
            callback(dict.fromkeys(offsets, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        elif group.is_static_member_fenced(member_id, group_instance_id):
            callback(dict.fromkeys(offsets, ErrorCode.FENCED_INSTANCE_ID))
        elif generation_id < 0 and group.is_(GroupState.EMPTY):
            self._store_offsets(group, offsets, callback)
        elif not group.has(member_id):
            callback(dict.fromkeys(offsets, ErrorCode.UNKNOWN_MEMBER_ID))
        elif generation_id != group.generation_id:
            callback(dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION))
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            # The member has this generation's JoinGroup answer but not its assignment yet.
            callback(dict.fromkeys(offsets, ErrorCode.REBALANCE_IN_PROGRESS))
        else:  # Stable or PreparingRebalance: the heartbeat answer tells it about the rebalance
            self._complete_and_schedule_next_heartbeat(group, group.get(member_id))
            self._store_offsets(group, offsets, callback)

    def metadata_fits(self, metadata: str) -> bool:
        return len(metadata.encode('utf-16-le')) // 2 <= self.config.offset_metadata_max_bytes

    def _store_offsets(self, group: Group, offsets: Mapping[TopicPartition, CommittedOffset],
                       callback: Callable[[dict[TopicPartition, int]], None]) -> None:
        fitting = {tp: value for tp, value in offsets.items() if self.metadata_fits(value.metadata)}
        if not fitting:
            callback(dict.fromkeys(offsets, ErrorCode.OFFSET_METADATA_TOO_LARGE))
            return
        self._append_order += 1
        order = self._append_order
        group.prepare_offset_commit(fitting)

        def stored(code: int) -> None:
            if code == ErrorCode.NONE:
                if not group.is_(GroupState.DEAD):
                    for tp, value in fitting.items():
                        group.on_offset_commit_append(tp, value, order)
                error: int = ErrorCode.NONE
            else:
                if not group.is_(GroupState.DEAD):
                    for tp, value in fitting.items():
                        group.fail_pending_offset_write(tp, value)
                error = _store_offsets_error(code)
            callback({tp: (error if tp in fitting else ErrorCode.OFFSET_METADATA_TOO_LARGE) for tp in offsets})

        self._write(group.group_id, KEEP_GROUP, fitting, stored)

    def handle_fetch_offsets(self, group_id: str, require_stable: bool, partitions: list[TopicPartition] | None
                             ) -> tuple[int, dict[TopicPartition, FetchedOffset]]:
        error = self.validate_group_status(group_id, Api.OFFSET_FETCH)
        if error is not None:
            return error, {}
        none = FetchedOffset(INVALID_OFFSET, -1, '', ErrorCode.NONE)
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.NONE, dict.fromkeys(partitions or [], none)
        out: dict[TopicPartition, FetchedOffset] = {}
        for tp in (partitions if partitions is not None else list(group.offsets)):
            if require_stable and group.has_pending_offset_commit(tp):
                out[tp] = FetchedOffset(INVALID_OFFSET, -1, '', ErrorCode.UNSTABLE_OFFSET_COMMIT)
                continue
            value = group.offset(tp)
            out[tp] = none if value is None else FetchedOffset(value.offset, value.leader_epoch, value.metadata,
                                                               ErrorCode.NONE)
        return ErrorCode.NONE, out

    # ---- ListGroups / DescribeGroups --------------------------------------------------------

    def handle_list_groups(self, states: set[str]) -> tuple[int, list[tuple[str, str, str]]]:
        """(group id, protocol type, state) of every cached group, `states` filtering when not empty."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.loading else ErrorCode.NONE
        return error, [(g.group_id, g.protocol_type or '', g.state.value) for g in self.groups.values()
                       if not states or g.state.value in states]

    def handle_describe_group(self, group_id: str) -> tuple[int, dict[str, object]]:
        error = self.validate_group_status(group_id, Api.DESCRIBE_GROUPS)
        if error is not None:
            return error, {'group_state': '', 'protocol_type': '', 'protocol_data': '', 'members': []}
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, {'group_state': GroupState.DEAD.value, 'protocol_type': '', 'protocol_data': '',
                                    'members': []}
        return ErrorCode.NONE, group.summary()

    # ---- DeleteGroups / OffsetDelete / expiry -----------------------------------------------

    def handle_delete_groups(self, group_ids: Iterable[str], done: Callable[[dict[str, int]], None]) -> None:
        errors: dict[str, int] = {}
        eligible: list[Group] = []
        for group_id in dict.fromkeys(group_ids):
            error = self.validate_group_status(group_id, Api.DELETE_GROUPS)
            if error is not None:
                errors[group_id] = error
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                errors[group_id] = ErrorCode.GROUP_ID_NOT_FOUND if self._group_not_exists(group_id) \
                    else ErrorCode.NOT_COORDINATOR
            elif group.is_(GroupState.EMPTY):
                group.transition_to(GroupState.DEAD, self.now_ms())
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        if not eligible:
            done(errors)
            return

        def cleaned(_removed: int) -> None:
            errors.update(dict.fromkeys((g.group_id for g in eligible), ErrorCode.NONE))
            log.info('group.deleted', broker_id=self.broker_id, groups=[g.group_id for g in eligible])
            done(errors)

        self._cleanup_group_metadata(eligible, lambda g: g.remove_all_offsets(), cleaned)

    def handle_delete_offsets(self, group_id: str, partitions: list[TopicPartition],
                              done: Callable[[int, dict[TopicPartition, int]], None]) -> None:
        error = self.validate_group_status(group_id, Api.OFFSET_DELETE)
        if error is not None:
            done(error, {})
            return
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            done(ErrorCode.GROUP_ID_NOT_FOUND if self._group_not_exists(group_id) else ErrorCode.NOT_COORDINATOR, {})
            return
        errors: dict[TopicPartition, int] = {}
        if group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif group.is_consumer_group:
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp[0])]
            errors.update({tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions
                           if group.is_subscribed_to_topic(tp[0])})
        else:
            done(ErrorCode.NON_EMPTY_GROUP, {})
            return
        if not eligible:
            done(ErrorCode.NONE, errors)
            return

        def cleaned(_removed: int) -> None:
            errors.update(dict.fromkeys(eligible, ErrorCode.NONE))
            done(ErrorCode.NONE, errors)

        self._cleanup_group_metadata([group], lambda g: g.remove_offsets(eligible), cleaned)

    def _schedule_expiry(self) -> None:
        self._timers.schedule(('expire',), self.config.offsets_retention_check_interval_ms, self._on_expiry_timer)

    def _on_expiry_timer(self) -> None:
        if not self.active:
            return
        self.cleanup_expired_offsets()
        self._schedule_expiry()

    def cleanup_expired_offsets(self, done: Callable[[int], None] | None = None) -> None:
        """GroupMetadataManager.cleanupGroupMetadata(): every `offsets.retention.check.interval.ms`."""
        now = self.now_ms()
        retention = self.config.offsets_retention_ms

        def finished(removed: int) -> None:
            if removed:
                log.info('group.offsets_expired', broker_id=self.broker_id, offsets=removed)
            if done is not None:
                done(removed)

        self._cleanup_group_metadata(list(self.groups.values()),
                                     lambda g: g.remove_expired_offsets(now, retention), finished)

    def _cleanup_group_metadata(self, groups: list[Group],
                                selector: Callable[[Group], dict[TopicPartition, CommittedOffset]],
                                done: Callable[[int], None]) -> None:
        """Removes offsets (and groups left empty without offsets) from the cache and writes their
        tombstones; `done(count of offsets removed)` once every write has answered."""
        writes: list[tuple[str, GroupRecord | None | _Keep, dict[TopicPartition, CommittedOffset | None]]] = []
        removed = 0
        for group in groups:
            removed_offsets = selector(group)
            if group.is_(GroupState.EMPTY) and not group.has_offsets():
                group.transition_to(GroupState.DEAD, self.now_ms())
            tombstone_group: GroupRecord | None | _Keep = KEEP_GROUP
            if group.is_(GroupState.DEAD) and self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
                self.completed_rebalances.pop(group.group_id, None)  # not kept per id once gone
                self._cancel_group_timers(group)
                if group.generation_id > 0:
                    tombstone_group = None  # generation 0: only offsets were ever written
            if removed_offsets or tombstone_group is None:
                tombstones: dict[TopicPartition, CommittedOffset | None] = dict.fromkeys(removed_offsets)
                writes.append((group.group_id, tombstone_group, tombstones))
                removed += len(removed_offsets)
        if not writes:
            done(removed)
            return
        outstanding = [len(writes)]

        def one_done(code: int) -> None:
            if code != ErrorCode.NONE:
                # Kafka writes these with acks=0 and lets the next pass retry; so do we.
                log.warning('group.tombstones_not_written', broker_id=self.broker_id, error=ErrorCode.name_of(code))
            outstanding[0] -= 1
            if outstanding[0] == 0:
                done(removed)

        for group_id, record, tombstones in writes:
            self._write(group_id, record, tombstones, one_done)

    # ---- the group record ---------------------------------------------------------------------

    def _store_group(self, group: Group, assignment: Mapping[str, bytes], callback: WriteCallback) -> None:
        self._write(group.group_id, _group_record(group, assignment), {}, callback)


def _group_record(group: Group, assignment: Mapping[str, bytes]) -> GroupRecord:
    """GroupMetadataManager.groupMetadataValue (value schema v3)."""
    protocol = group.protocol_name
    members = tuple(
        MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                     m.session_timeout_ms, m.metadata(protocol) if protocol is not None else b'',
                     bytes(assignment.get(m.member_id, b'')))
        for m in group.members.values())
    return GroupRecord(group.protocol_type or '', group.generation_id, protocol, group.leader_id,
                       group.current_state_timestamp_ms if group.current_state_timestamp_ms is not None else -1,
                       members)


def _group_from_record(broker_id: int, group_id: str, record: GroupRecord, now_ms: int) -> Group:
    """GroupMetadata.loadGroup: Empty without members, else Stable with the stored assignment."""
    if record.members and record.protocol is None:
        # Members without a protocol cannot be a Stable group (Kafka fails such a load): keep the
        # generation and let the members rejoin.
        log.warning('group.loaded_members_without_protocol', broker_id=broker_id, group=group_id, generation=record.generation)
        record = GroupRecord(record.protocol_type, record.generation, None, None, record.current_state_timestamp_ms, ())
    group = Group(group_id, GroupState.STABLE if record.members else GroupState.EMPTY, now_ms)
    group.generation_id = record.generation
    group.protocol_type = record.protocol_type or None
    group.protocol_name = record.protocol
    group.current_state_timestamp_ms = record.current_state_timestamp_ms \
        if record.current_state_timestamp_ms >= 0 else None
    protocol_type = record.protocol_type
    for m in record.members:
        protocols = [(record.protocol, m.subscription)] if record.protocol is not None else []
        member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                        m.session_timeout_ms, protocol_type, protocols, m.assignment)
        group.add(member)
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    group.leader_id = record.leader
    group.subscribed = group.compute_subscribed_topics()
    return group


__all__ = ['CONSUMER_PROTOCOL_TYPE', 'Api', 'FetchedOffset', 'GroupConfig', 'GroupMachine', 'LeaveMember', 'Timers']
