"""The seam between the group coordinator and `__consumer_offsets`: what each side may expect.

The coordinator (broker/group/coordinator.py and its state machine) keeps groups and committed
offsets in memory and decides; the offsets store (broker/group/offsets_topic.py) makes them
durable in `__consumer_offsets` in Kafka's own key/value formats and loads them back when this
broker becomes leader of one of its partitions. Neither side knows the other's internals: these
record types and the two Protocols below are the whole contract.

Kafka 2.8 names, for orientation: `CommittedOffset` is `OffsetAndMetadata`, `GroupRecord` is what
`GroupMetadataManager.groupMetadataValue` writes (value schema v3), `GroupStore.write` is
`storeGroup`/`storeOffsets` (one append of one batch), the listener is
`GroupCoordinator.onElection`/`onResignation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

OFFSETS_TOPIC = '__consumer_offsets'

TopicPartition = tuple[str, int]


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` over UTF-16 code units, as a signed 32-bit int."""
    value = 0
    data = text.encode('utf-16-be')
    for index in range(0, len(data), 2):
        value = (31 * value + ((data[index] << 8) | data[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def partition_for(group_id: str, partition_count: int) -> int:
    """Kafka's `partitionFor`: `Utils.abs(groupId.hashCode) % partitions` (abs maps MIN_VALUE to 0)."""
    hashed = java_string_hash(group_id)
    return (0 if hashed == -(1 << 31) else abs(hashed)) % partition_count


@dataclass(frozen=True)
class CommittedOffset:
    """One committed offset (offset commit value v3; v1 when `expire_timestamp_ms` is set)."""

    offset: int
    leader_epoch: int  # -1: none given
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True)
class MemberRecord:
    """A member as group metadata value v3 stores it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """A group's durable state (group metadata value v3); an empty group has no members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...]


class _Keep:
    """Marker: leave the group's metadata record as it is (an offsets-only write)."""


KEEP_GROUP = _Keep()


class GroupStore(Protocol):
    """`__consumer_offsets` as the coordinator sees it (implemented by broker/group/offsets_topic.py)."""

    def partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition that owns `group_id` (`offsets.topic.num.partitions`)."""
        ...

    async def write(
        self,
        group_id: str,
        group: GroupRecord | None | _Keep,
        offsets: Mapping[TopicPartition, CommittedOffset | None],
    ) -> int:
        """Append one batch to the group's partition with acks=all and wait for it.

        `group`: a record to write, None for a tombstone (the group is deleted), KEEP_GROUP for
        none. `offsets`: records to write, None values are tombstones. Returns the produce error
        code (0 when every in-sync replica has it; REQUEST_TIMED_OUT after
        `offsets.commit.timeout.ms`; NOT_LEADER_OR_FOLLOWER when this broker no longer leads the
        partition; MESSAGE_TOO_LARGE…); the coordinator maps it to the group API's error the way
        Kafka's GroupMetadataManager does. Never raises for storage errors.
        """
        ...


class GroupLoadListener(Protocol):
    """What the store tells the coordinator about partition ownership (implemented by the coordinator)."""

    def partition_loading(self, partition: int) -> None:
        """This broker became leader of `partition`; until it is loaded, its groups answer
        COORDINATOR_LOAD_IN_PROGRESS."""
        ...

    def partition_loaded(
        self,
        partition: int,
        groups: Mapping[str, GroupRecord],
        offsets: Mapping[str, Mapping[TopicPartition, CommittedOffset]],
    ) -> None:
        """The partition's log was replayed (last record per key wins, tombstones removed); the
        coordinator now owns its groups. `offsets` may name groups absent from `groups`
        (simple consumers that only commit)."""
        ...

    def partition_unloaded(self, partition: int) -> None:
        """This broker no longer leads `partition`: drop its groups (members get NOT_COORDINATOR)."""
        ...
