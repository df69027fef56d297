"""broker.log.cleaner.rules and .batches: Kafka 2.8's cleaner decisions, on a fake clock and plain bytes."""

from __future__ import annotations

from broker.log.cleaner.batches import OffsetMap, filter_batch, map_batch
from broker.log.cleaner.rules import (
    CompactionConfig,
    SegmentStat,
    cleanable_offsets,
    delete_horizon_ms,
    filthiest,
    group_by_size,
    offset_map_capacity,
    retain_deletes,
)
from protocol.layouts import RECORD_BATCH_HEADER
from protocol.records import compression, record_batch
from protocol.records.record_batch import batch_contents

NOW = 1_700_000_000_000
COMPACT = CompactionConfig(compact=True)


def seg(base: int, size: int = 100, largest: int = NOW - 10_000, first: int = NOW - 20_000,
        modified: int = NOW - 10_000) -> SegmentStat:
    return SegmentStat(base, size, largest, first, modified)


def log_of(*bases: int) -> list[SegmentStat]:
    return [seg(b) for b in bases]


def test_the_dirty_range_runs_from_the_checkpoint_to_the_active_segment() -> None:
    segs = log_of(0, 10, 20, 30)  # 30 is active
    c = cleanable_offsets(segs, 0, 35, 35, None, NOW, COMPACT)
    assert (c.first_dirty, c.first_uncleanable, c.clean_bytes, c.cleanable_bytes) == (0, 30, 0, 300)
    assert c.ratio == 1.0 and c.eligible(COMPACT)
    c = cleanable_offsets(segs, 0, 35, 35, 20, NOW, COMPACT)
    assert (c.first_dirty, c.first_uncleanable, c.clean_bytes, c.cleanable_bytes) == (20, 30, 200, 100)
    assert abs(c.ratio - 1 / 3) < 1e-9 and not c.eligible(COMPACT)  # below min.cleanable.dirty.ratio 0.5
    assert c.eligible(CompactionConfig(compact=True, min_cleanable_ratio=0.3))


def test_a_checkpoint_outside_the_log_resets_to_the_log_start() -> None:
    segs = log_of(10, 20, 30)
    below = cleanable_offsets(segs, 10, 35, 35, 5, NOW, COMPACT)
    above = cleanable_offsets(segs, 10, 35, 35, 99, NOW, COMPACT)
    assert (below.first_dirty, below.reset_checkpoint) == (10, True)
    assert (above.first_dirty, above.reset_checkpoint) == (10, True)


def test_min_compaction_lag_stops_at_the_first_segment_with_a_recent_record() -> None:
    segs = [seg(0, largest=NOW - 60_000), seg(10, largest=NOW - 5_000), seg(20, largest=NOW - 70_000), seg(30)]
    lag = CompactionConfig(compact=True, min_compaction_lag_ms=30_000)
    c = cleanable_offsets(segs, 0, 35, 35, None, NOW, lag)
    assert c.first_uncleanable == 10 and c.cleanable_bytes == 100
    # Time moves on: the same log becomes cleanable up to the active segment.
    assert cleanable_offsets(segs, 0, 35, 35, None, NOW + 30_000, lag).first_uncleanable == 30


def test_the_high_watermark_bounds_the_range() -> None:
    segs = log_of(0, 10, 20, 30)
    assert cleanable_offsets(segs, 0, 35, 15, None, NOW, COMPACT).first_uncleanable == 10


def test_max_compaction_lag_forces_a_log_below_the_ratio() -> None:
    segs = [seg(0, first=NOW - 100_000), seg(10, first=NOW - 50_000), seg(20)]
    lazy = CompactionConfig(compact=True, min_cleanable_ratio=0.99, max_compaction_lag_ms=60_000)
    c = cleanable_offsets(segs, 0, 25, 25, 10, NOW, lazy)
    assert c.max_compaction_delay_ms == 0 and not c.eligible(lazy)  # the dirty segment is 50 s old
    later = cleanable_offsets(segs, 0, 25, 25, 10, NOW + 20_000, lazy)
    assert later.max_compaction_delay_ms == 10_000 and later.needs_compaction_now and later.eligible(lazy)


def test_the_filthiest_compacted_log_goes_first() -> None:
    a = cleanable_offsets(log_of(0, 10, 20, 30), 0, 35, 35, 20, NOW, COMPACT)  # 1/3
    b = cleanable_offsets(log_of(0, 10, 20, 30), 0, 35, 35, 10, NOW, COMPACT)  # 2/3
    c = cleanable_offsets(log_of(0, 10, 20, 30), 0, 35, 35, None, NOW, COMPACT)  # 1
    assert filthiest([(a, COMPACT), (b, COMPACT)]) == 1
    assert filthiest([(a, COMPACT), (b, COMPACT), (c, CompactionConfig())]) == 1  # delete policy: never
    assert filthiest([(a, COMPACT)]) is None


def test_the_delete_horizon_is_the_last_clean_segments_time_less_delete_retention() -> None:
    segs = [seg(0, modified=NOW - 50_000), seg(10, modified=NOW - 40_000), seg(20, modified=NOW - 1000), seg(30)]
    assert delete_horizon_ms(segs, 0, 10_000) == 0  # nothing clean yet: every tombstone stays
    horizon = delete_horizon_ms(segs, 20, 10_000)
    assert horizon == NOW - 50_000
    assert not retain_deletes(segs[0], horizon) and retain_deletes(segs[1], horizon)


def test_groups_hold_at_most_segment_bytes() -> None:
    segs = [seg(0, 40), seg(10, 40), seg(20, 40), seg(30, 90), seg(40, 10), seg(50)]
    assert group_by_size(segs, 100, 50) == [[0, 1], [2], [3, 4]]
    assert group_by_size(segs, 100, 25) == [[0, 1], [2]]


def test_the_offset_map_is_sized_by_the_dedupe_buffer() -> None:
    assert offset_map_capacity(128 * 1024 * 1024, 1) == int(128 * 1024 * 1024 // 128 * 0.9)
    assert offset_map_capacity(128 * 1024 * 1024, 2) == offset_map_capacity(64 * 1024 * 1024, 1)


# ---- batches ----------------------------------------------------------------------------------

def kv_batch(base: int, pairs: list[tuple[bytes | None, bytes | None]], codec: int = compression.NONE,
             producer_id: int = -1, base_sequence: int = -1) -> bytes:
    return record_batch.build_batch([(NOW + i, k, v, ()) for i, (k, v) in enumerate(pairs)], base_offset=base,
                                    codec=codec, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                    base_sequence=base_sequence)


def records_of(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    got = batch_contents(memoryview(data), 0)
    assert got is not None
    return [(o, k, v) for o, _, k, v in got[2]]


def test_the_latest_record_per_key_stays_with_its_offset() -> None:
    first = kv_batch(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])
    second = kv_batch(3, [(b"b", b"2"), (b"c", b"1")], codec=compression.GZIP)
    m = OffsetMap(100)
    assert map_batch(m, first, 0) and map_batch(m, second, 0)
    assert m.latest_offset == 4 and len(m) == 3
    out = filter_batch(first, m, True, frozenset())
    assert out is not None
    data, kept, _, read = out
    assert (kept, read) == (1, 3)
    assert records_of(bytes(data)) == [(2, b"a", b"2")]
    head = RECORD_BATCH_HEADER.unpack_from(data, 0)
    assert head[0] == 0 and head[6] == 2  # base offset and last offset delta kept: offsets never change
    # A batch whose records all stay is written as it is.
    out2 = filter_batch(second, m, True, frozenset())
    assert out2 is not None and out2[0] is second


def test_tombstones_go_only_past_the_delete_horizon_and_keyless_records_go() -> None:
    b = kv_batch(0, [(b"a", b"1"), (b"a", None), (None, b"x"), (b"b", b"1")])
    m = OffsetMap(100)
    map_batch(m, b, 0)
    kept = filter_batch(b, m, True, frozenset())
    assert kept is not None and records_of(bytes(kept[0])) == [(1, b"a", None), (3, b"b", b"1")]
    gone = filter_batch(b, m, False, frozenset())
    assert gone is not None and records_of(bytes(gone[0])) == [(3, b"b", b"1")]


def test_records_past_a_full_maps_end_stay() -> None:
    b = kv_batch(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1")])
    m = OffsetMap(2)
    assert not map_batch(m, b, 0)  # c does not fit
    assert m.latest_offset == 2
    out = filter_batch(b, m, True, frozenset())
    assert out is not None and records_of(bytes(out[0])) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1")]


def test_a_live_producers_last_batch_stays_as_an_empty_header() -> None:
    old = kv_batch(10, [(b"a", b"1"), (b"a", b"2")], producer_id=7, base_sequence=4)
    newer = kv_batch(12, [(b"a", b"3")])
    m = OffsetMap(10)
    map_batch(m, old, 0)
    map_batch(m, newer, 0)
    assert filter_batch(old, m, True, frozenset()) is None
    out = filter_batch(old, m, True, frozenset({(7, 11)}))
    assert out is not None
    data, kept, _, _ = out
    (base, _, _, _, _, attributes, last_delta, _, _, pid, epoch, seq, count) = RECORD_BATCH_HEADER.unpack_from(data, 0)
    assert (base, last_delta, pid, epoch, seq, count, kept) == (10, 1, 7, 0, 4, 0, 0)
    assert len(data) == 61 and attributes & 0x07 == 0
    # The batch is that producer's last only if its last offset is the one the producer state holds.
    assert filter_batch(old, m, True, frozenset({(7, 99)})) is None


def test_the_cleaner_checkpoint_is_kafkas_offset_checkpoint_format(tmp_path) -> None:  # noqa: ANN001
    from broker.log.cleaner import checkpoint

    checkpoint.write(tmp_path, {("t", 1): 42, ("a b", 0): 7})
    assert (tmp_path / "cleaner-offset-checkpoint").read_text() == "0\n2\na b 0 7\nt 1 42\n"
    assert checkpoint.read(tmp_path) == {("t", 1): 42, ("a b", 0): 7}
    (tmp_path / "cleaner-offset-checkpoint").write_text("0\n3\nt 1 42\n")  # torn: every log dirty again
    assert checkpoint.read(tmp_path) == {}
    assert checkpoint.read(tmp_path / "missing") == {}
