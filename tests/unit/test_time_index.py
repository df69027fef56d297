"""The time index: Kafka's TimeIndex rules without I/O, ListOffsets v0's legacy answer, the
records front's timestamp reading, and the log's lookup by timestamp against a brute-force
model across rolls, reopen, crash recovery, deleted or corrupt .timeindex files and truncation."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import Log
from broker.log.time_index import (
    EARLIEST,
    LATEST,
    NO_TIMESTAMP,
    TimeIndex,
    TimestampOffset,
    TimestampTracker,
    legacy_offsets,
)
from protocol.records import compression
from protocol.records.message_set import build_message_set
from protocol.records.record_batch import LOG_APPEND_TIME, build_batch
from protocol.records.records import first_at_or_after, max_timestamp, time_head

# ---- the pure index ------------------------------------------------------------------------------


def test_empty_index_answers_the_base_offset() -> None:
    idx = TimeIndex(100)
    assert idx.last_entry == TimestampOffset(NO_TIMESTAMP, 100)
    assert idx.lookup(5) == TimestampOffset(NO_TIMESTAMP, 100)
    assert idx.to_bytes() == b"" and len(idx) == 0


def test_entries_are_added_only_when_the_timestamp_grows() -> None:
    idx = TimeIndex(100)
    assert idx.maybe_append(NO_TIMESTAMP, 100) is None  # magic 0: no timestamps, no entries
    assert idx.maybe_append(10, 105) == struct.pack(">qi", 10, 5)
    assert idx.maybe_append(10, 105) is None  # the repeat a roll or close offers
    assert idx.maybe_append(10, 107) is None  # same timestamp further on: the first offset stays
    assert idx.maybe_append(20, 107) == struct.pack(">qi", 20, 7)
    assert idx.entries == [TimestampOffset(10, 105), TimestampOffset(20, 107)]
    with pytest.raises(ValueError):
        idx.maybe_append(30, 106)  # offsets never go back
    with pytest.raises(ValueError):
        idx.maybe_append(15, 110)  # nor timestamps
    with pytest.raises(ValueError):
        TimeIndex(0).maybe_append(1, 1 << 31)  # beyond a relative int32


def test_lookup_is_the_last_entry_at_or_below() -> None:
    idx = TimeIndex(0)
    for ts, off in [(10, 3), (20, 9), (30, 15)]:
        idx.maybe_append(ts, off)
    assert idx.lookup(9) == TimestampOffset(NO_TIMESTAMP, 0)
    assert idx.lookup(10) == TimestampOffset(10, 3)
    assert idx.lookup(29) == TimestampOffset(20, 9)
    assert idx.lookup(10 ** 15) == TimestampOffset(30, 15)


def test_truncation_drops_entries_at_or_above_the_offset() -> None:
    idx = TimeIndex(0)
    for ts, off in [(10, 3), (20, 9), (30, 15)]:
        idx.maybe_append(ts, off)
    assert idx.truncate_to(16) == 3
    assert idx.truncate_to(9) == 1  # the entry for 9 itself goes
    assert idx.entries == [TimestampOffset(10, 3)]
    assert idx.truncate_to(0) == 0 and idx.last_entry == TimestampOffset(NO_TIMESTAMP, 0)
    assert idx.maybe_append(5, 1) is not None  # a truncated index takes smaller timestamps again


def test_parse_round_trips_and_refuses_corrupt_files() -> None:
    idx = TimeIndex(1000)
    for ts, off in [(10, 1000), (20, 1009), (30, 1009)]:
        idx.maybe_append(ts, off)
    raw = idx.to_bytes()
    assert len(raw) == 36
    back = TimeIndex.parse(1000, raw)
    assert back is not None and back.entries == idx.entries
    assert TimeIndex.parse(1000, b"") is not None
    assert TimeIndex.parse(1000, raw[:-1]) is None  # torn
    assert TimeIndex.parse(1000, struct.pack(">qiqi", 20, 1, 10, 2)) is None  # timestamps go back
    assert TimeIndex.parse(1000, struct.pack(">qiqi", 10, 1, 10, 2)) is None  # and must strictly grow
    assert TimeIndex.parse(1000, struct.pack(">qiqi", 10, 5, 20, 2)) is None  # offsets go back
    assert TimeIndex.parse(1000, struct.pack(">qi", 10, -1)) is None  # below the base


@given(st.lists(st.tuples(st.integers(-1, 50), st.integers(0, 3)), max_size=60), st.integers(-5, 60))
def test_lookup_agrees_with_a_scan(steps: list[tuple[int, int]], target: int) -> None:
    idx = TimeIndex(7)
    tracker = TimestampTracker()
    offset = 7
    for ts, gap in steps:
        offset += gap
        tracker.observe(ts, offset)
        idx.maybe_append(tracker.max_timestamp, tracker.offset_of_max)
    entries = idx.entries
    assert all(a.timestamp < b.timestamp and a.offset <= b.offset for a, b in zip(entries, entries[1:], strict=False))
    below = [e for e in entries if e.timestamp <= target]
    assert idx.lookup(target) == (below[-1] if below else TimestampOffset(NO_TIMESTAMP, 7))


def test_tracker_keeps_the_first_offset_of_the_largest_timestamp() -> None:
    t = TimestampTracker()
    assert (t.max_timestamp, t.offset_of_max) == (NO_TIMESTAMP, -1)
    for ts, off in [(5, 1), (9, 2), (9, 3), (4, 4)]:
        t.observe(ts, off)
    assert (t.max_timestamp, t.offset_of_max) == (9, 2)


def test_legacy_offsets_are_kafkas() -> None:
    # Segments based at 0, 10, 20 modified at t=100, 200, 300; the log ends at 25 at now=400.
    points = [(0, 100), (10, 200), (20, 300), (25, 400)]
    assert legacy_offsets(points, LATEST, 1) == [25]
    assert legacy_offsets(points, LATEST, 10) == [25, 20, 10, 0]
    assert legacy_offsets(points, EARLIEST, 5) == [0]
    assert legacy_offsets(points, 250, 2) == [10, 0]
    assert legacy_offsets(points, 300, 1) == [20]
    assert legacy_offsets(points, 50, 3) == []
    assert legacy_offsets(points, LATEST, 0) == []


# ---- the records front ---------------------------------------------------------------------------


def v2_batch(base: int, timestamps: list[int], codec: int = 0, epoch: int = -1, log_append: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, ts in enumerate(timestamps):
        b.append(i, timestamp=ts, key=None, value=b"v%d" % i, headers=[])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base)
    struct.pack_into(">i", data, 12, epoch)  # partition leader epoch: outside the CRC
    if log_append:
        # LogAppendTime: the broker's time in max_timestamp for every record; the CRC covers it.
        import crc32c
        struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x08)
        struct.pack_into(">q", data, 35, 999)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_time_head_reads_every_magic() -> None:
    v0 = build_message_set([(None, b"a", 5)], magic=0, base_offset=3)
    v1 = build_message_set([(None, b"a", 5), (None, b"b", 9)], magic=1, base_offset=3)
    wrapped = build_message_set([(None, b"a", 5), (None, b"b", 9), (None, b"c", 7)], magic=1, codec=1,
                                base_offset=3)
    v2 = v2_batch(40, [5, 11, 8], epoch=6)
    assert time_head(v0, 0) == (len(v0), NO_TIMESTAMP, 3, -1)
    assert time_head(v1, 0)[1:] == (5, 3, -1)
    assert time_head(wrapped, 0) == (len(wrapped), 9, 5, -1)  # the wrapper's timestamp, its last offset
    assert time_head(v2, 0) == (len(v2), 11, 42, 6)
    mixed = v1 + wrapped + v2
    assert max_timestamp(mixed) == (11, 42)
    assert max_timestamp(v1 + v1) == (9, 4)  # the first entry reaching it
    assert max_timestamp(v0) == (NO_TIMESTAMP, -1)


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP])
def test_first_at_or_after_reads_inside_an_entry(codec: int) -> None:
    v2 = v2_batch(40, [5, 11, 8, 12], codec=codec, epoch=3)
    assert first_at_or_after(v2, 8, 0) == (11, 41, 3)
    assert first_at_or_after(v2, 8, 42) == (8, 42, 3)  # at or after the log start
    assert first_at_or_after(v2, 13, 0) is None
    wrapped = build_message_set([(None, b"a", 5), (None, b"b", 9), (None, b"c", 7)], magic=1, codec=1,
                                base_offset=3)
    assert first_at_or_after(wrapped, 6, 0) == (9, 4, -1)
    assert first_at_or_after(v2_batch(0, [1, 2], log_append=True), 500, 0) == (999, 0, -1)


# ---- the log: lookups against a model -------------------------------------------------------------


def first_at_or_after_model(records: list[tuple[int, int]], target: int) -> int | None:
    return next((off for off, ts in records if ts >= target), None)


def append_v1(log: Log, timestamps: list[int], codec: int = 0) -> None:
    base = log.log_end_offset
    data = build_message_set([(None, b"x" * 20, t) for t in timestamps], magic=1, codec=codec, base_offset=base)
    log.append(data, base + len(timestamps) - 1)


def append_v2(log: Log, timestamps: list[int], codec: int = 0) -> None:
    """One RecordBatch v2 (the log's format since message format v2) holding the records."""
    base = log.log_end_offset
    data = build_batch([(t, None, b"x" * 20, []) for t in timestamps], base_offset=base, codec=codec,
                       partition_leader_epoch=3)
    log.append(data, base + len(timestamps) - 1)


def lookup(log: Log, target: int) -> int | None:
    found = log.offset_for_timestamp(target)
    return None if found is None else found[1]


appends = st.lists(st.tuples(st.lists(st.integers(0, 200), min_size=1, max_size=5), st.booleans(),
                             st.sampled_from([1, 2])), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=appends, segment_bytes=st.integers(150, 1200), interval=st.integers(1, 300),
       targets=st.lists(st.integers(-1, 210), min_size=1, max_size=8), data=st.data())
def test_log_lookup_matches_a_scan(tmp_path_factory: pytest.TempPathFactory,
                                   batches: list[tuple[list[int], bool, int]],
                                   segment_bytes: int, interval: int, targets: list[int],
                                   data: st.DataObject) -> None:
    directory = tmp_path_factory.mktemp("log")
    log = Log.open(directory, segment_bytes=segment_bytes, index_interval_bytes=interval)
    records: list[tuple[int, int]] = []
    for timestamps, gzip, magic in batches:  # magic-1 entries (older logs) and v2 batches, mixed
        base = log.log_end_offset
        (append_v1 if magic == 1 else append_v2)(log, timestamps, compression.GZIP if gzip else 0)
        records += [(base + i, t) for i, t in enumerate(timestamps)]

    def check(log: Log, records: list[tuple[int, int]]) -> None:
        for t in targets:
            assert lookup(log, t) == first_at_or_after_model(records, t), (t, records)

    check(log, records)
    log.close()  # clean: the indexes are trusted
    log = Log.open(directory, segment_bytes=segment_bytes, index_interval_bytes=interval)
    check(log, records)
    log._close_fds()  # a crash: the last segment is recovered
    log = Log.open(directory, segment_bytes=segment_bytes, index_interval_bytes=interval)
    check(log, records)
    log.close()
    for p in directory.glob("*.timeindex"):  # every time index rebuilt from its segment
        p.unlink()
    log = Log.open(directory, segment_bytes=segment_bytes, index_interval_bytes=interval)
    # An inactive segment's rebuilt file is written at the open, the active one's at its next flush.
    assert all(p.exists() for p in (s.time_index_path for s in log.segments[:-1]))
    check(log, records)
    log.flush()
    assert all(p.exists() for p in (s.time_index_path for s in log.segments))
    # Follower truncation keeps the index consistent, and appends carry on from there.
    cut = data.draw(st.integers(0, log.log_end_offset))
    log.truncate_to(cut)
    records = [(o, t) for o, t in records if o < log.log_end_offset]
    check(log, records)
    base = log.log_end_offset
    append_v2(log, [150, 3, 205])
    records += [(base, 150), (base + 1, 3), (base + 2, 205)]
    check(log, records)
    log.close()
    log = Log.open(directory, segment_bytes=segment_bytes, index_interval_bytes=interval)
    check(log, records)
    log.close()


def test_index_points_follow_kafkas_append_rule(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=100)
    for ts in [10, 30, 20, 40, 40, 50]:
        append_v1(log, [ts])  # 54-byte entries: more than 100 bytes since the last point every second one
    seg = log.segments[-1]
    # Points at appends 3 and 5, each with the maximum so far (the first offset that reached it).
    assert seg.time_index.entries == [TimestampOffset(30, 1), TimestampOffset(40, 3)]
    assert (seg.timestamps.max_timestamp, seg.timestamps.offset_of_max) == (50, 5)
    log.close()  # the final entry holds the segment's maximum
    assert TimeIndex.parse(0, seg.time_index_path.read_bytes()).entries == [  # type: ignore[union-attr]
        TimestampOffset(30, 1), TimestampOffset(40, 3), TimestampOffset(50, 5)]


def test_roll_seals_the_old_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=150, index_interval_bytes=4096)
    append_v1(log, [10, 20])
    append_v1(log, [30, 5])  # does not fit: rolls
    first, second = log.segments
    assert first.time_index.entries == [TimestampOffset(20, 1)]
    assert second.time_index.entries == []
    assert lookup(log, 15) == 1 and lookup(log, 25) == 2 and lookup(log, 31) is None


def test_corrupt_time_index_is_rebuilt(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=200, index_interval_bytes=50)
    for i in range(20):
        append_v1(log, [1000 + i])
    log.close()
    victim = sorted(tmp_path.glob("*.timeindex"))[1]
    victim.write_bytes(struct.pack(">qiqi", 9, 0, 3, 0))  # timestamps going back
    log = Log.open(tmp_path, segment_bytes=200, index_interval_bytes=50)
    assert all(lookup(log, 1000 + i) == i for i in range(20))
    assert TimeIndex.parse(log.segments[1].base_offset, victim.read_bytes()) is not None


def test_segments_without_timestamps_use_their_last_modified_time(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=4096)
    base = log.log_end_offset
    log.append(build_message_set([(None, b"old", 0)], magic=0, base_offset=base), base)
    seg = log.segments[0]
    os.utime(seg.log_path, ns=(5_000_000_000, 5_000_000_000))
    assert seg.largest_timestamp == 5000
    assert seg.time_index.entries == [] and lookup(log, 1) is None  # Kafka: nothing has a timestamp
    assert log.legacy_offsets_before(4999, 5, now_ms=9000) == []
    assert log.legacy_offsets_before(6000, 5, now_ms=9000) == [0]
    assert log.legacy_offsets_before(LATEST, 5, now_ms=9000) == [1, 0]


def test_v2_batches_answer_with_their_leader_epoch_and_log_append_time(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=64)
    append_v2(log, [10, 30, 20])
    base = log.log_end_offset
    log.append(build_batch([(5, None, b"a", []), (6, None, b"b", [])], base_offset=base,
                           timestamp_type=LOG_APPEND_TIME, log_append_time=500, partition_leader_epoch=7), base + 1)
    assert log.offset_for_timestamp(15) == (30, 1, 3)  # the batch's partition leader epoch
    assert log.offset_for_timestamp(31) == (500, 3, 7)  # LogAppendTime: every record carries the batch's time
    assert log.segments[0].timestamps.max_timestamp == 500
    assert log.offset_for_timestamp(501) is None


def test_failed_log_write_leaves_the_time_index_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC on the .log write of an append that would add a time index point: the append is
    undone in the file and in memory, the time index included."""
    import errno

    from broker.log import KafkaStorageError
    from broker.log import segment as segment_module

    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=100)
    for ts in (10, 20):
        append_v2(log, [ts])
    seg = log.segments[-1]
    before = (log.log_end_offset, os.fstat(seg.fd).st_size, seg.index_entries, seg.time_index.entries,
              seg.timestamps.max_timestamp)
    real, log_fd = segment_module._write_all, seg.fd

    def write(fd: int, data: bytes | memoryview) -> None:
        if fd == log_fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)
    monkeypatch.setattr(segment_module, "_write_all", write)
    with pytest.raises(KafkaStorageError) as err:
        append_v2(log, [30])  # more than 100 bytes since the last point: an index point, and a time entry
    assert str(err.value.error.filename).endswith(".log")
    assert (log.log_end_offset, os.fstat(seg.fd).st_size, seg.index_entries, seg.time_index.entries,
            seg.timestamps.max_timestamp) == before
    monkeypatch.undo()
    log._close_fds()  # the failed log is abandoned; recovery finds the two appends before it
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=100)
    assert log.log_end_offset == 2 and lookup(log, 15) == 1 and lookup(log, 21) is None
    log.close()
