"""What `__consumer_offsets` records mean, both ways (pure: bytes and the store's types, no I/O).

`records_for` turns one GroupStore.write into the (key, value) pairs of its batch: the group's
metadata record first (value v3, None: a tombstone), then its offsets (value v3, or v1 when an
expire timestamp is set; None: a tombstone), as Kafka 2.8's storeGroup/storeOffsets write them.

`Replay` is Kafka 2.8's GroupMetadataManager.doLoadGroupsAndOffsets over a partition's log
bytes, fed a slice at a time: every record's key says what it is; the last record per key wins
and a tombstone removes it (an offset tombstone the offset, a group tombstone the group record;
the group's offsets have tombstones of their own). Batches of any format are read (magic 2, and
magic 0/1 entries of a log written before), compressed ones too. Transactional offset commits
(none are written here) count once their producer's COMMIT marker is read and are dropped at its
ABORT, as in Kafka. Departure: a record whose key or value is not one of Kafka's formats, or a
record without a key, is skipped and counted (`skipped`); Kafka 2.8 abandons the whole load.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping

from broker.group.store import CommittedOffset, GroupRecord, MemberRecord, TopicPartition, _Keep
from protocol.group_metadata import (
    NO_TIMESTAMP,
    GroupMetadataError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from protocol.layouts import MAGIC_OFFSET, RECORD_BATCH_HEADER
from protocol.records import message_set, record_batch

KeyValue = tuple[bytes, bytes | None]
_ENTRY_OFFSET = struct.Struct(">q")
_CONTROL_KEY = struct.Struct(">hh")  # Kafka's ControlRecordType key: version, type
_COMMIT = 1  # (0 is ABORT: the pending commits are dropped)


# ---- the store's types to Kafka's records ------------------------------------------------------

def group_value(record: GroupRecord) -> bytes:
    return encode_group_value(GroupMetadataValue(
        record.protocol_type, record.generation, record.protocol, record.leader, record.current_state_timestamp_ms,
        tuple(MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                             m.session_timeout_ms, m.subscription, m.assignment) for m in record.members)))


def offset_value(offset: CommittedOffset) -> bytes:
    expire = NO_TIMESTAMP if offset.expire_timestamp_ms is None else offset.expire_timestamp_ms
    return encode_offset_value(OffsetCommitValue(offset.offset, offset.leader_epoch, offset.metadata,
                                                 offset.commit_timestamp_ms, expire))


def records_for(group_id: str, group: GroupRecord | None | _Keep,
                offsets: Mapping[TopicPartition, CommittedOffset | None]) -> list[KeyValue]:
    """The records of one GroupStore.write, in the order Kafka writes them."""
    out: list[KeyValue] = []
    if not isinstance(group, _Keep):
        out.append((encode_group_key(GroupMetadataKey(group_id)), None if group is None else group_value(group)))
    for (topic, partition), offset in offsets.items():
        out.append((encode_offset_key(OffsetCommitKey(group_id, topic, partition)),
                    None if offset is None else offset_value(offset)))
    return out


# ---- Kafka's records to the store's types ------------------------------------------------------

def group_record(value: GroupMetadataValue) -> GroupRecord:
    return GroupRecord(value.protocol_type, value.generation, value.protocol, value.leader,
                       value.current_state_timestamp,
                       tuple(MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                          m.rebalance_timeout, m.session_timeout, m.subscription, m.assignment)
                             for m in value.members))


def committed_offset(value: OffsetCommitValue) -> CommittedOffset:
    expire = None if value.expire_timestamp == NO_TIMESTAMP else value.expire_timestamp
    return CommittedOffset(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, expire)


class Replay:
    """One partition's groups and offsets, rebuilt from its log (see the module docstring)."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupRecord] = {}
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # Transactional offset commits waiting for their producer's marker, by producer id.
        self._pending: dict[int, dict[tuple[str, TopicPartition], CommittedOffset | None]] = {}
        self.records = 0
        self.skipped = 0

    def apply(self, data: bytes | memoryview) -> Iterator[int]:
        """Apply every whole batch or entry in `data`, yielding the offset after each: where the
        next read starts (a cut-off tail is left for it). Raises RecordsError on a corrupt batch."""
        buf = memoryview(data)
        pos = 0
        while pos + MAGIC_OFFSET < len(buf):
            if buf[pos + MAGIC_OFFSET] == 2:
                if pos + record_batch.HEADER_SIZE > len(buf):
                    return
                head = RECORD_BATCH_HEADER.unpack_from(buf, pos)
                base_offset, last_delta, producer_id = head[0], head[6], head[9]
                contents = record_batch.batch_contents(buf, pos)
                if contents is None:
                    return
                attributes, _, records, pos = contents
                if attributes & record_batch.CONTROL_BIT:
                    self._control(producer_id, records)
                else:
                    txn = producer_id if attributes & record_batch.TRANSACTIONAL_BIT else None
                    for _, _, key, value in records:
                        self._record(key, value, txn)
                yield base_offset + last_delta + 1
            else:
                entry = message_set.decode_entry(buf, pos)
                if entry is None:
                    return
                last_offset = _ENTRY_OFFSET.unpack_from(buf, pos)[0]  # a wrapper's offset is its last
                old_records, pos = entry
                for r in old_records:
                    self._record(r.key, r.value, None)
                yield last_offset + 1

    def _record(self, key: bytes | None, value: bytes | None, txn: int | None) -> None:
        self.records += 1
        if key is None:
            self.skipped += 1
            return
        try:
            decoded = decode_key(key)
            if isinstance(decoded, GroupMetadataKey):
                if txn is not None:  # Kafka writes group metadata outside transactions only
                    self.skipped += 1
                elif value is None:
                    self.groups.pop(decoded.group, None)
                else:
                    self.groups[decoded.group] = group_record(decode_group_value(value))
                return
            tp = (decoded.topic, decoded.partition)
            offset = None if value is None else committed_offset(decode_offset_value(value))
        except GroupMetadataError:
            self.skipped += 1
            return
        if txn is not None:
            self._pending.setdefault(txn, {})[(decoded.group, tp)] = offset
        else:
            self._set_offset(decoded.group, tp, offset)

    def _set_offset(self, group: str, tp: TopicPartition, offset: CommittedOffset | None) -> None:
        if offset is None:
            offsets = self.offsets.get(group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.offsets[group]
        else:
            self.offsets.setdefault(group, {})[tp] = offset

    def _control(self, producer_id: int, records: list[record_batch.BatchRecord]) -> None:
        pending = self._pending.pop(producer_id, {})
        key = records[0][2] if records else None
        if key is None or len(key) < _CONTROL_KEY.size:
            return
        _, kind = _CONTROL_KEY.unpack_from(key)
        if kind == _COMMIT:
            for (group, tp), offset in pending.items():
                self._set_offset(group, tp, offset)


__all__ = ["KeyValue", "Replay", "committed_offset", "group_record", "group_value", "offset_value", "records_for"]
