"""The partition leader epochs stamped in a record set (KIP-101), read from the entry heads only.

Every RecordBatch v2 carries partitionLeaderEpoch at bytes 12-16 of its header (outside the
CRC, so the leader stamps it after validation); magic 0/1 entries carry none. Readers here look
at each entry's first 17 bytes (offset, size, epoch field, magic) and skip the body, so they
cost one struct call per batch whatever the batch holds.
"""

from __future__ import annotations

import struct

from protocol.layouts import LOG_OVERHEAD, MAGIC_OFFSET, RecordBatchHeader, fixed, offset_of

RECORD_BATCH_MAGIC = 2
NO_PARTITION_LEADER_EPOCH = -1  # Kafka: RecordBatch.NO_PARTITION_LEADER_EPOCH
# base_offset, batch_length, partition_leader_epoch, magic: one unpack per entry.
_HEAD = fixed(RecordBatchHeader, last="magic")
HEAD_SIZE = _HEAD.size  # 17
PARTITION_LEADER_EPOCH_OFFSET = offset_of(RecordBatchHeader, "partition_leader_epoch")  # 12
if HEAD_SIZE != MAGIC_OFFSET + 1:  # pragma: no cover
    raise AssertionError("the batch head does not end at the magic byte")
_EPOCH = struct.Struct(">i")


def epoch_runs(buf: bytes | bytearray | memoryview) -> tuple[list[tuple[int, int]], int]:
    """(epoch, base offset) of each magic-2 batch whose epoch differs from the batch before it, and
    the position of the first entry not read: its 17-byte head is not whole in `buf` (the position
    is past len(buf) when the last entry read runs beyond it), or -1 at an impossible size.

    Batches without an epoch (NO_PARTITION_LEADER_EPOCH) and magic 0/1 entries are skipped.
    """
    runs: list[tuple[int, int]] = []
    last = NO_PARTITION_LEADER_EPOCH
    pos, end = 0, len(buf)
    while pos + HEAD_SIZE <= end:
        base, size, epoch, magic = _HEAD.unpack_from(buf, pos)
        if size <= 0:
            return runs, -1
        if magic == RECORD_BATCH_MAGIC and epoch != NO_PARTITION_LEADER_EPOCH and epoch != last:
            runs.append((epoch, base))
            last = epoch
        pos += LOG_OVERHEAD + size
    return runs, pos


def partition_leader_epoch(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The epoch stamped in the batch at `pos`, NO_PARTITION_LEADER_EPOCH for a magic 0/1 entry."""
    if buf[pos + MAGIC_OFFSET] != RECORD_BATCH_MAGIC:
        return NO_PARTITION_LEADER_EPOCH
    return int(_EPOCH.unpack_from(buf, pos + PARTITION_LEADER_EPOCH_OFFSET)[0])
