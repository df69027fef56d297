"""A group and its members as the coordinator keeps them: Kafka 2.8's GroupMetadata and MemberMetadata.

Pure data with the rules that belong to the data (state transitions, protocol votes, static
member bookkeeping, committed offsets, expiry); the decisions that involve time or writes are
in broker/group/machine.py. Nothing here does I/O or reads a clock: times are passed in.

Departure from Kafka: transactional offset commits are not kept (there is no TxnOffsetCommit),
so `require_stable` only ever waits on a group's own pending commits.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.group.store import CommittedOffset, TopicPartition
from protocol.consumer_protocol import subscription_topics
from protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = 'consumer'
MEMBER_ID_DELIMITER = '-'


class GroupState(enum.Enum):
    """GroupState, with the names DescribeGroups and ListGroups show."""

    EMPTY = 'Empty'
    PREPARING_REBALANCE = 'PreparingRebalance'
    COMPLETING_REBALANCE = 'CompletingRebalance'
    STABLE = 'Stable'
    DEAD = 'Dead'


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                               GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass
class JoinResult:
    """What a JoinGroup is answered with (Kafka's JoinGroupResult)."""

    member_id: str
    error: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ''
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # (member id, instance id, metadata)


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b''


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]

Protocols = list[tuple[str, bytes]]


class Member:
    """MemberMetadata: one member, its protocols, its assignment and the callbacks it waits on."""

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: Protocols, assignment: bytes = b'') -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        self.is_leaving = False
        self.is_new = False
        # Set when a heartbeat (or anything showing the client alive) arrives; cleared each
        # time the next expiry is scheduled.
        self.heartbeat_satisfied = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise ValueError(f'member {self.member_id} does not support protocol {protocol}')

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return self.heartbeat_satisfied  # a new member may expire while awaiting its join
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return True  # members in a rebalance are alive by definition
        return self.heartbeat_satisfied

    def matches(self, protocols: Protocols) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError('member supports none of the candidate protocols')


@dataclass
class _Offset:
    """A committed offset and the order of the append that wrote it (Kafka's appendedBatchOffset)."""

    value: CommittedOffset
    append_order: int


class Group:
    """GroupMetadata: membership, generation, protocol, and the group's committed offsets."""

    def __init__(self, group_id: str, state: GroupState, now_ms: int) -> None:
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp_ms: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}
        self.offsets: dict[TopicPartition, _Offset] = {}
        self.pending_offset_commits: dict[TopicPartition, CommittedOffset] = {}
        self.subscribed: set[str] | None = None
        self.new_member_added = False

    # ---- state -----------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransition(f'group {self.group_id}: {self.state.value} -> {state.value}')
        self.state = state
        self.current_state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # ---- members ---------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member, callback: JoinCallback | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        for name, _ in member.protocols:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        member.awaiting_join = callback
        if callback is not None:
            self.num_awaiting_join += 1

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            for name, _ in member.protocols:
                self.supported_protocols[name] -= 1
            if member.awaiting_join is not None:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_sync_members.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keeps the leader if it rejoined, else makes any rejoined member leader; False when
        the group has no leader or nobody rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join is not None:
            return True
        for member_id, member in self.members.items():
            if member.awaiting_join is not None:
                self.leader_id = member_id
                return True
        return False

    def replace_group_instance(self, old_member_id: str, new_member_id: str, group_instance_id: str) -> Member:
        """A static member rejoining with an unknown member id takes over its old entry under a new id;
        whoever still waits under the old id is fenced."""
        member = self.members.pop(old_member_id)
        self.maybe_invoke_join(member, JoinResult(old_member_id, ErrorCode.FENCED_INSTANCE_ID))
        self.maybe_invoke_sync(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members and not self.has(member_id)

    def has_static_member(self, group_instance_id: str | None) -> bool:
        return group_instance_id is not None and group_instance_id in self.static_members

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        return (group_instance_id is not None and group_instance_id in self.static_members
                and self.static_members[group_instance_id] != member_id)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @staticmethod
    def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
        return (group_instance_id if group_instance_id is not None else client_id) + MEMBER_ID_DELIMITER + \
            str(uuid.uuid4())

    def update_member(self, member: Member, protocols: Protocols, callback: JoinCallback | None) -> None:
        for name, _ in member.protocols:
            self.supported_protocols[name] -= 1
        for name, _ in protocols:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        member.protocols = protocols
        if callback is not None and member.awaiting_join is None:
            self.num_awaiting_join += 1
        elif callback is None and member.awaiting_join is not None:
            self.num_awaiting_join -= 1
        member.awaiting_join = callback

    def maybe_invoke_join(self, member: Member, result: JoinResult) -> None:
        callback = member.awaiting_join
        if callback is not None:
            member.awaiting_join = None
            self.num_awaiting_join -= 1
            callback(result)

    def maybe_invoke_sync(self, member: Member, result: SyncResult) -> bool:
        callback = member.awaiting_sync
        if callback is None:
            return False
        member.awaiting_sync = None
        callback(result)
        return True

    # ---- protocols -------------------------------------------------------------------------

    def _candidates(self) -> set[str]:
        return {name for name, count in self.supported_protocols.items() if count == len(self.members)}

    def select_protocol(self) -> str:
        """Every member votes for its first protocol among those all support; the most votes win
        (ties: the first to reach the count, as Kafka's groupBy/maxBy is unordered)."""
        if not self.members:
            raise ValueError('cannot select a protocol for an empty group')
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes.items(), key=lambda item: item[1])[0]

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        if self.is_(GroupState.EMPTY):
            return protocol_type != '' and bool(protocols)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == len(self.members) for name in protocols)

    def compute_subscribed_topics(self) -> set[str] | None:
        """The union of the members' subscriptions, for consumer groups whose metadata parses."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return True if self.subscribed is None else topic in self.subscribed

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        assert self.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def summary(self) -> dict[str, Any]:
        """DescribeGroups' view: members with metadata and assignment only when Stable."""
        if self.is_(GroupState.STABLE):
            protocol = self.protocol_name or ''
            members = [(m, m.metadata(protocol), m.assignment) for m in self.members.values()]
        else:
            protocol = ''
            members = [(m, b'', b'') for m in self.members.values()]
        return {
            'group_state': self.state.value, 'protocol_type': self.protocol_type or '', 'protocol_data': protocol,
            'members': [{'member_id': m.member_id, 'group_instance_id': m.group_instance_id,
                         'client_id': m.client_id, 'client_host': m.client_host,
                         'member_metadata': meta, 'member_assignment': assignment}
                        for m, meta, assignment in members],
        }

    # ---- offsets ---------------------------------------------------------------------------

    def initialize_offsets(self, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        for tp, value in offsets.items():
            self.offsets[tp] = _Offset(value, -1)

    def prepare_offset_commit(self, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(self, tp: TopicPartition, value: CommittedOffset, append_order: int) -> None:
        if tp in self.pending_offset_commits:
            current = self.offsets.get(tp)
            if current is None or current.append_order < append_order:
                self.offsets[tp] = _Offset(value, append_order)
        if self.pending_offset_commits.get(tp) == value:
            del self.pending_offset_commits[tp]

    def fail_pending_offset_write(self, tp: TopicPartition, value: CommittedOffset) -> None:
        if self.pending_offset_commits.get(tp) == value:
            del self.pending_offset_commits[tp]

    def has_pending_offset_commit(self, tp: TopicPartition) -> bool:
        return tp in self.pending_offset_commits

    def offset(self, tp: TopicPartition) -> CommittedOffset | None:
        entry = self.offsets.get(tp)
        return None if entry is None else entry.value

    def all_offsets(self) -> dict[TopicPartition, CommittedOffset]:
        return {tp: entry.value for tp, entry in self.offsets.items()}

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_offset_commits)

    def remove_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, CommittedOffset]:
        removed: dict[TopicPartition, CommittedOffset] = {}
        for tp in partitions:
            self.pending_offset_commits.pop(tp, None)
            entry = self.offsets.pop(tp, None)
            if entry is not None:
                removed[tp] = entry.value
        return removed

    def remove_all_offsets(self) -> dict[TopicPartition, CommittedOffset]:
        return self.remove_offsets(list(self.offsets))

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict[TopicPartition, CommittedOffset]:
        """GroupMetadata.removeExpiredOffsets (KIP-211): an empty group's offsets expire
        `retention_ms` after it became empty; a stable consumer group's offsets of topics it no
        longer subscribes to, after their commit; a group that only commits, after the commit.
        An offset written with an explicit expire timestamp (OffsetCommit v2-4's retention time)
        expires at that timestamp instead."""

        def expired(base: Callable[[CommittedOffset], int], subscribed: set[str] | frozenset[str] = frozenset()
                    ) -> dict[TopicPartition, CommittedOffset]:
            out = {}
            for tp, entry in self.offsets.items():
                if tp[0] in subscribed or tp in self.pending_offset_commits:
                    continue
                value = entry.value
                if value.expire_timestamp_ms is None:
                    if now_ms - base(value) >= retention_ms:
                        out[tp] = value
                elif now_ms >= value.expire_timestamp_ms:
                    out[tp] = value
            return out

        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            state_ts = self.current_state_timestamp_ms
            found = expired(lambda v: state_ts if state_ts is not None else v.commit_timestamp_ms)
        elif (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed is not None
              and self.is_(GroupState.STABLE)):
            found = expired(lambda v: v.commit_timestamp_ms, self.subscribed)
        elif self.protocol_type is None:
            found = expired(lambda v: v.commit_timestamp_ms)
        else:
            found = {}
        for tp in found:
            del self.offsets[tp]
        return found

