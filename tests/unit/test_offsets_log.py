"""broker.group.offsets_log: a GroupStore write's records, and the replay of a partition's log.

Log bytes are built with the project's record builders (RecordBatch v2, magic 1 message sets)
from records the way Kafka 2.8 lays them out; the replay must give, per key, the last record,
with tombstones removing, whatever the batching, compression or slicing of the bytes.
"""

from __future__ import annotations

import struct

import pytest

from broker.group.offsets_log import Replay, records_for
from broker.group.store import KEEP_GROUP, CommittedOffset, GroupRecord, MemberRecord
from protocol.group_metadata import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
)
from protocol.records import compression
from protocol.records.message_set import build_message_set
from protocol.records.record_batch import build_batch

MEMBER = MemberRecord("m-1", None, "client-1", "/10.0.0.1", 60000, 10000, b"sub", b"assign")
GROUP = GroupRecord("consumer", 3, "range", "m-1", 1_700_000_000_000, (MEMBER,))
EMPTY = GroupRecord("consumer", 4, None, None, 1_700_000_000_500, ())


def offset(n: int, epoch: int = 2, expire: int | None = None) -> CommittedOffset:
    return CommittedOffset(n, epoch if expire is None else -1, f"meta-{n}", 1_700_000_000_000 + n, expire)


def log_of(*writes: tuple, base: int = 0, codec: int = compression.NONE, producer_id: int = -1,
           transactional: bool = False) -> tuple[bytes, int]:
    """Batches, one per write (group_id, group, offsets), at offsets from `base`; (bytes, next offset)."""
    out = b""
    for group_id, group, offsets in writes:
        recs = records_for(group_id, group, offsets)
        out += build_batch([(1_700_000_000_000, k, v, ()) for k, v in recs], base_offset=base, codec=codec,
                           producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=0 if producer_id >= 0 else -1, transactional=transactional)
        base += len(recs)
    return out, base


def replayed(*pieces: bytes) -> Replay:
    r = Replay()
    for piece in pieces:
        list(r.apply(piece))
    return r


def test_records_for_writes_group_first_then_offsets() -> None:
    recs = records_for("g", GROUP, {("t", 0): offset(5), ("t", 1): None})
    assert [decode_key(k) for k, _ in recs] == [GroupMetadataKey("g"), OffsetCommitKey("g", "t", 0),
                                                OffsetCommitKey("g", "t", 1)]
    assert decode_group_value(recs[0][1] or b"").generation == 3
    assert decode_offset_value(recs[1][1] or b"") == OffsetCommitValue(5, 2, "meta-5", 1_700_000_000_005)
    assert recs[2][1] is None
    assert [decode_key(k) for k, _ in records_for("g", KEEP_GROUP, {("t", 0): offset(1)})] == [
        OffsetCommitKey("g", "t", 0)]
    assert records_for("g", None, {}) == [(records_for("g", None, {})[0][0], None)]


def test_expire_timestamp_written_as_v1() -> None:
    recs = records_for("g", KEEP_GROUP, {("t", 0): offset(5, expire=1_800_000_000_000)})
    value = recs[0][1] or b""
    assert struct.unpack_from(">h", value)[0] == 1
    assert decode_offset_value(value).expire_timestamp == 1_800_000_000_000


def test_last_record_per_key_wins_and_tombstones_remove() -> None:
    data, _ = log_of(
        ("g1", GROUP, {("t", 0): offset(1), ("t", 1): offset(2)}),
        ("g2", KEEP_GROUP, {("u", 7): offset(70)}),          # a simple consumer: offsets, no group
        ("g1", KEEP_GROUP, {("t", 0): offset(10)}),          # newer commit
        ("g1", EMPTY, {("t", 1): None}),                     # group emptied, one offset deleted
        ("g3", GROUP, {("x", 0): offset(3)}),
        ("g3", None, {}),                                    # group deleted: its offsets stay until theirs
    )
    r = replayed(data)
    assert r.groups == {"g1": EMPTY}
    assert r.offsets == {"g1": {("t", 0): offset(10)}, "g2": {("u", 7): offset(70)}, "g3": {("x", 0): offset(3)}}
    assert r.skipped == 0
    assert r.records == 10


def test_every_offset_tombstoned_removes_the_group_entry() -> None:
    data, _ = log_of(("g", KEEP_GROUP, {("t", 0): offset(1)}), ("g", KEEP_GROUP, {("t", 0): None}))
    assert replayed(data).offsets == {}


@pytest.mark.parametrize("codec", [compression.GZIP, compression.LZ4, compression.ZSTD, compression.SNAPPY])
def test_compressed_batches(codec: int) -> None:
    data, _ = log_of(("g", GROUP, {("t", i): offset(i) for i in range(50)}), codec=codec)
    r = replayed(data)
    assert r.groups == {"g": GROUP}
    assert r.offsets["g"] == {("t", i): offset(i) for i in range(50)}


def test_offsets_yielded_and_a_cut_off_tail_left_for_the_next_read() -> None:
    batches = [log_of(("g", KEEP_GROUP, {("t", 0): offset(i), ("t", 1): offset(i + 1)}), base=2 * i)[0]
               for i in range(10)]
    data = b"".join(batches)
    r = Replay()
    nexts = list(r.apply(data[:-7]))
    assert nexts == [2 * (i + 1) for i in range(9)]  # nine whole batches of two records; the tenth cut off
    # the reader starts again at the batch boundary the last yielded offset names
    assert list(r.apply(batches[-1])) == [20]
    assert r.offsets["g"] == {("t", 0): offset(9), ("t", 1): offset(10)}
    # a piece too short to hold a batch header yields nothing
    assert list(Replay().apply(data[:40])) == []


def test_magic1_entries_of_an_older_log() -> None:
    key = encode_offset_key(OffsetCommitKey("g", "t", 0))
    old = build_message_set([(key, encode_offset_value(OffsetCommitValue(5, -1, "", 1)), 1),
                             (key, encode_offset_value(OffsetCommitValue(6, -1, "", 2)), 2)], magic=1)
    newer, _ = log_of(("g", KEEP_GROUP, {("t", 1): offset(9)}), base=2)
    r = Replay()
    assert list(r.apply(old + newer)) == [1, 2, 3]
    assert r.offsets["g"] == {("t", 0): CommittedOffset(6, -1, "", 2), ("t", 1): offset(9)}
    compressed = build_message_set([(key, encode_offset_value(OffsetCommitValue(7, -1, "", 3)), 3)], magic=1,
                                   codec=compression.GZIP, base_offset=3)
    assert list(r.apply(compressed)) == [4]
    assert r.offsets["g"][("t", 0)] == CommittedOffset(7, -1, "", 3)


def _marker(producer_id: int, base: int, commit: bool) -> bytes:
    return build_batch([(1, struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0), ())],
                       base_offset=base, producer_id=producer_id, producer_epoch=0, transactional=True,
                       control=True)


def test_transactional_commits_count_at_their_marker() -> None:
    plain, base = log_of(("g", KEEP_GROUP, {("t", 0): offset(1), ("t", 1): offset(1)}))
    committed, base = log_of(("g", KEEP_GROUP, {("t", 0): offset(20)}), base=base, producer_id=7, transactional=True)
    aborted, base = log_of(("g", KEEP_GROUP, {("t", 1): offset(30)}), base=base, producer_id=8, transactional=True)
    data = plain + committed + aborted + _marker(8, base, commit=False) + _marker(7, base + 1, commit=True)
    r = replayed(data)
    assert r.offsets["g"] == {("t", 0): offset(20), ("t", 1): offset(1)}


def test_records_not_in_kafkas_formats_are_skipped_and_counted() -> None:
    good, base = log_of(("g", KEEP_GROUP, {("t", 0): offset(1)}))
    bad = build_batch([(1, None, b"no key", ()), (1, b"\x00\x09junk", b"v", ()),
                       (1, encode_offset_key(OffsetCommitKey("g", "t", 1)), b"\x00\x07garbage", ())], base_offset=base)
    r = replayed(good + bad)
    assert r.offsets == {"g": {("t", 0): offset(1)}}
    assert (r.records, r.skipped) == (4, 3)


def test_a_corrupt_batch_raises() -> None:
    data = bytearray(log_of(("g", KEEP_GROUP, {("t", 0): offset(1)}))[0])
    data[-1] ^= 0xFF
    with pytest.raises(Exception, match="CRC"):
        list(Replay().apply(bytes(data)))
