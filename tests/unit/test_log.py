"""broker/log: append/read round trips, Kafka's read rules, recovery, truncation, a model-based test."""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.log import FileSlice, InvalidAppend, Log, OffsetOutOfRange
from broker.log.log import CLEAN_SHUTDOWN

# ---- entry builders (message format v1, uncompressed unless wrapped) --------------------


def _bytes_field(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def message(value: bytes, key: bytes | None = None, attributes: int = 0, timestamp: int = 0) -> bytes:
    body = struct.pack(">bbq", 1, attributes, timestamp) + _bytes_field(key) + _bytes_field(value)
    return struct.pack(">I", zlib.crc32(body)) + body


def entry(offset: int, value: bytes = b"v", key: bytes | None = None) -> bytes:
    msg = message(value, key)
    return struct.pack(">qi", offset, len(msg)) + msg


def wrapper(first_offset: int, values: list[bytes]) -> bytes:
    """A gzip wrapper (v1, relative inner offsets) carrying its last inner offset outside."""
    inner = b"".join(entry(i, v) for i, v in enumerate(values))
    msg = message(gzip.compress(inner), attributes=1)
    return struct.pack(">qi", first_offset + len(values) - 1, len(msg)) + msg


def entries_in(data: bytes) -> list[tuple[int, int, int]]:
    """(position, offset, length) of every whole entry in data."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        if pos + 12 + size > len(data):
            break
        out.append((pos, offset, 12 + size))
        pos += 12 + size
    return out


# ---- an in-memory model of the same rules ------------------------------------------------


@dataclass
class E:
    first: int
    last: int
    data: bytes


@dataclass
class Model:
    segment_bytes: int
    segments: list[tuple[int, list[E]]] = field(default_factory=lambda: [(0, [])])
    leo: int = 0

    @property
    def start(self) -> int:
        return self.segments[0][0]

    @property
    def size(self) -> int:
        return sum(len(e.data) for _, es in self.segments for e in es)

    def append(self, es: list[E]) -> None:
        n = sum(len(e.data) for e in es)
        used = sum(len(e.data) for e in self.segments[-1][1])
        if used and used + n > self.segment_bytes:
            self.segments.append((self.leo, []))
        self.segments[-1][1].extend(es)
        self.leo = es[-1].last + 1

    def read(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool, partial: bool) -> bytes:
        if offset == self.leo:
            return b""
        if offset < self.start or offset > self.leo:
            raise OffsetOutOfRange(offset, self.start, self.leo)
        if max_offset is not None and max_offset <= offset:
            return b""
        i = max(j for j, (base, _) in enumerate(self.segments) if base <= offset)
        for _, es in self.segments[i:]:
            rest = [e for e in es if e.last >= offset]
            if rest:
                break
        else:
            return b""
        first = len(rest[0].data)
        if max_offset is not None:
            rest = [e for e in rest if e.last < max_offset]
        data = b"".join(e.data for e in rest)
        limit = max(max_bytes, first) if min_one else max_bytes
        if limit <= 0 or (limit < first and not partial):
            return b""
        return data[:limit]

    def truncate(self, offset: int) -> None:
        if offset >= self.leo:
            return
        if offset < self.start:
            self.segments, self.leo = [(offset, [])], offset
            return
        i = max(j for j, (base, _) in enumerate(self.segments) if base <= offset)
        base, es = self.segments[i]
        kept = [e for e in es if e.last < offset]
        self.segments = self.segments[:i] + [(base, kept)]
        self.leo = kept[-1].last + 1 if kept else base

    def all_bytes(self) -> bytes:
        return b"".join(e.data for _, es in self.segments for e in es)


def crash(log: Log) -> None:
    """What a kill -9 leaves: fds gone, written bytes in place, no clean-shutdown marker."""
    log._close_fds()


def segment_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.suffix == ".log")


def fill(log: Log, n: int, value_size: int = 50) -> list[E]:
    out = []
    for _ in range(n):
        off = log.log_end_offset
        data = entry(off, bytes([off % 251]) * value_size)
        log.append(data, off)
        out.append(E(off, off, data))
    return out


def whole_log_bytes(log: Log) -> bytes:
    return b"".join(seg.log_path.read_bytes() for seg in log.segments)


# ---- round trips -------------------------------------------------------------------------


def test_empty_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "p0")
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 1000).read_bytes() == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(1, 1000)
    assert segment_files(tmp_path / "p0") == [f"{0:020d}.log"]
    log.close()


def test_round_trip_across_rolled_segments_every_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    model = Model(1000)
    for k in range(120):
        off = log.log_end_offset
        if k % 7 == 3:  # a wrapper of 5 offsets
            es = [E(off, off + 4, wrapper(off, [b"x" * k, b"y", b"z", b"w", b"q"]))]
        elif k % 5 == 0:  # several entries in one append
            es = [E(off + j, off + j, entry(off + j, bytes(k + j))) for j in range(3)]
        else:
            es = [E(off, off, entry(off, bytes(k * 3)))]
        data = b"".join(e.data for e in es)
        pos = log.append(data, es[-1].last)
        model.append(es)
        assert pos == len(log.segments[-1].log_path.read_bytes()) - len(data)
    assert log.log_end_offset == model.leo
    assert log.size_bytes == len(model.all_bytes())
    assert whole_log_bytes(log) == model.all_bytes()
    assert [s.base_offset for s in log.segments] == [b for b, _ in model.segments]
    assert len(log.segments) > 5
    for seg in log.segments:
        assert seg.size <= 1000
    # A segment holding one large append has no index point (Kafka indexes before an
    # append only once the interval is exceeded), but a small interval must index most.
    assert sum(bool(seg.index_entries) for seg in log.segments) > len(log.segments) // 2
    for offset in range(model.leo):
        got = log.read(offset, 1 << 20).read_bytes()
        assert got == model.read(offset, 1 << 20, None, False, True), offset
        assert entries_in(got)[0][1] >= offset
    log.close()


def test_index_lookup_correct_at_every_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=256)
    fill(log, 300, value_size=40)
    seg = log.segments[0]
    data = seg.log_path.read_bytes()
    positions = {off: pos for pos, off, _ in entries_in(data)}
    index = seg.index_entries
    assert len(index) > 10
    # Index points sit on entry boundaries, about index_interval bytes apart, keyed by the
    # offset of the entry they point at (every entry here holds one offset).
    prev = 0
    for key, pos in index:
        assert positions[key] == pos
        assert 256 < pos - prev <= 256 + 120
        prev = pos
    for offset in range(300):
        key, pos = seg.lookup(offset)
        assert key <= offset and pos <= positions[offset]
        assert positions[offset] - pos <= 256 + 120  # the forward scan stays short
    # The on-disk index says the same as the in-memory one once flushed (the active segment's index
    # points are written at flush, roll and close, not on each append).
    log.flush()
    raw = seg.index_path.read_bytes()
    assert [(k, p) for k, p in struct.iter_unpack(">II", raw)] == [(k - seg.base_offset, p) for k, p in index]
    log.close()


def test_index_points_per_append_as_kafka_does(tmp_path: Path) -> None:
    log = Log.open(tmp_path, index_interval_bytes=100)
    big = b"".join(entry(i, b"a" * 60) for i in range(50))
    log.append(big, 49)
    # Kafka's LogSegment.append: a point only once more than the interval has been appended,
    # at the first entry of the next append; reads inside a big append scan from before it.
    assert log.segments[0].index_entries == []
    log.append(entry(50, b"b" * 60), 50)
    assert log.segments[0].index_entries == [(50, len(big))]
    log.append(entry(51, b"c"), 51)
    assert len(log.segments[0].index_entries) == 1
    for offset in range(52):
        assert entries_in(log.read(offset, 100000).read_bytes())[0][1] == offset
    log.close()


def test_reads_from_the_latest_append_agree_with_reads_by_index_points(tmp_path: Path) -> None:
    """A read starting at or after the latest append scans from that append (Segment.lookup_near),
    not from the last index point: the same slices as a reopened log (no such hint) gives, also
    with a wrapper as the latest append, and after a truncation cut it away."""
    log = Log.open(tmp_path / "live", index_interval_bytes=4096)
    fill(log, 120, value_size=40)  # many appends between index points
    log.append(wrapper(120, [b"x", b"y", b"z"]), 122)

    def reads(one: Log) -> list[bytes]:
        return [one.read(o, 100000, max_offset=m).read_bytes() for o in range(one.log_end_offset)
                for m in (None, min(o + 2, one.log_end_offset))]

    def reopened() -> Log:
        copy = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        copy.mkdir()
        for seg in log.segments:
            (copy / seg.log_path.name).write_bytes(seg.log_path.read_bytes())
        return Log.open(copy, index_interval_bytes=4096)

    for step in ("appended", "truncated", "appended again"):
        if step == "truncated":
            log.truncate_to(121)  # the wrapper (120-122) straddles 121 and goes whole
        elif step == "appended again":
            fill(log, 3)
        other = reopened()
        assert log.log_end_offset == other.log_end_offset
        assert reads(log) == reads(other), step
        other.close()
    log.close()


def test_append_rejects_offsets_going_backwards(tmp_path: Path) -> None:
    log = Log.open(tmp_path)
    fill(log, 3)
    with pytest.raises(InvalidAppend):
        log.append(entry(2), 2)
    with pytest.raises(InvalidAppend):
        log.append(b"\x00" * 5, 3)
    assert log.log_end_offset == 3
    assert log.append(b"", 3) == log.size_bytes
    log.close()


def test_append_never_splits_data_and_rolls_first(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=500)
    one = entry(0, b"a" * 100)
    log.append(one, 0)
    big = b"".join(entry(1 + i, b"b" * 100) for i in range(6))  # > segment_bytes on its own
    log.append(big, 6)
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert log.segments[1].size == len(big)
    log.append(entry(7), 7)
    assert [s.base_offset for s in log.segments] == [0, 1, 7]
    log.close()


def test_gap_in_offsets(tmp_path: Path) -> None:
    log = Log.open(tmp_path)
    log.append(entry(0), 0)
    log.append(entry(5), 5)
    assert log.log_end_offset == 6
    assert entries_in(log.read(2, 1000).read_bytes())[0][1] == 5
    log.close()


# ---- read rules (KIP-74) -----------------------------------------------------------------


@pytest.fixture
def five(tmp_path: Path) -> tuple[Log, list[bytes]]:
    log = Log.open(tmp_path)
    es = [entry(i, bytes([i]) * 100) for i in range(5)]
    for i, e in enumerate(es):
        log.append(e, i)
    return log, es


def test_read_max_bytes_cut_ends_inside_an_entry(five: tuple[Log, list[bytes]]) -> None:
    log, es = five
    size = len(es[0])
    got = log.read(1, size * 2 + 10).read_bytes()
    assert got == es[1] + es[2] + es[3][:10]


def test_read_first_entry_bigger_than_max_bytes(five: tuple[Log, list[bytes]]) -> None:
    log, es = five
    assert log.read(2, 30, min_one_message=True).read_bytes() == es[2]
    assert log.read(2, 30, min_one_message=True, allow_partial=False).read_bytes() == es[2]
    assert log.read(2, 30).read_bytes() == es[2][:30]  # Fetch v0-v2: partial as is
    assert log.read(2, 30, allow_partial=False).read_bytes() == b""  # Fetch v3: nothing
    assert log.read(2, 0).read_bytes() == b""
    assert log.read(2, 0, min_one_message=True).read_bytes() == es[2]


def test_read_whole_entries_ends_after_the_last_entry_that_fits(five: tuple[Log, list[bytes]]) -> None:
    log, es = five
    size = len(es[0])
    for cut in (0, 1, 11, 12, size - 1):
        assert log.read(1, size * 2 + cut, whole_entries=True).read_bytes() == es[1] + es[2]
    assert log.read(1, size * 3, whole_entries=True).read_bytes() == es[1] + es[2] + es[3]
    assert log.read(0, 1 << 20, whole_entries=True).read_bytes() == b"".join(es)
    # The first entry's rules are unchanged: whole with min_one_message, else nothing (v3).
    assert log.read(2, 30, min_one_message=True, allow_partial=False, whole_entries=True).read_bytes() == es[2]
    assert log.read(2, 30, allow_partial=False, whole_entries=True).read_bytes() == b""
    assert log.read(1, size + 5, min_one_message=True, allow_partial=False,
                    whole_entries=True).read_bytes() == es[1]
    # Inside a max_offset bound (a consumer's high watermark) too.
    assert log.read(0, size * 2 + 5, max_offset=4, whole_entries=True).read_bytes() == es[0] + es[1]


def test_read_whole_entries_walks_headers_across_read_chunks(tmp_path: Path) -> None:
    """Many small entries (the header walk rereads past each 16 KiB chunk) and large ones (one
    header a chunk): every cut ends exactly after the last entry that fits."""
    log = Log.open(tmp_path, index_interval_bytes=1 << 30)
    sizes = [40] * 600 + [20_000, 70_000, 33] + [40] * 50
    es = [entry(i, bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    for i, e in enumerate(es):
        log.append(e, i)
    ends, pos = [], 0
    for e in es:
        pos += len(e)
        ends.append(pos)
    total = ends[-1]
    for limit in list(range(len(es[0]), total, 997)) + [total - 1, total]:
        want = max(end for end in ends if end <= limit)
        got = log.read(0, limit, allow_partial=False, whole_entries=True)
        assert (got.position, got.length) == (0, want), limit
    assert log.read(0, total + 10, whole_entries=True).read_bytes() == b"".join(es)
    log.close()


def test_read_max_offset_bound(five: tuple[Log, list[bytes]]) -> None:
    log, es = five
    assert log.read(1, 10000, max_offset=3).read_bytes() == es[1] + es[2]
    assert log.read(1, 10000, max_offset=5).read_bytes() == b"".join(es[1:])
    assert log.read(3, 10000, max_offset=3).read_bytes() == b""
    assert log.read(3, 10000, max_offset=1).read_bytes() == b""
    assert log.read(1, 10000, max_offset=2, min_one_message=True).read_bytes() == es[1]
    # max_bytes still applies inside the max_offset bound, and vice versa.
    assert log.read(0, len(es[0]) + 5, max_offset=3).read_bytes() == es[0] + es[1][:5]


def test_read_out_of_range(five: tuple[Log, list[bytes]]) -> None:
    log, _ = five
    assert log.read(5, 1000).length == 0
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(6, 1000)
    assert (exc.value.offset, exc.value.log_start_offset, exc.value.log_end_offset) == (6, 0, 5)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1000)


def test_read_inside_a_multi_offset_entry_returns_the_whole_wrapper(tmp_path: Path) -> None:
    log = Log.open(tmp_path, index_interval_bytes=64)
    before = entry(0, b"p" * 80)
    w = wrapper(1, [b"a" * 30, b"b", b"c", b"d", b"e"])  # offsets 1..5, outer offset 5
    after = entry(6, b"s" * 80)
    log.append(before, 0)
    log.append(w, 5)
    log.append(after, 6)
    assert log.log_end_offset == 7
    for offset in range(1, 6):
        assert log.read(offset, 10000).read_bytes() == w + after
        assert log.read(offset, 10, min_one_message=True).read_bytes() == w
        assert log.read(offset, 10000, max_offset=6).read_bytes() == w
    assert log.read(6, 10000).read_bytes() == after
    log.truncate_to(3)  # a wrapper straddling the cut goes whole
    assert log.log_end_offset == 1
    assert whole_log_bytes(log) == before
    log.close()


def test_read_stays_in_one_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=300)
    es = fill(log, 10, value_size=100)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    got = log.read(0, 1 << 20).read_bytes()
    assert got == b"".join(e.data for e in es if e.first < bases[1])
    log.close()


def test_slice_stays_valid_across_roll_and_sendfile(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=300)
    es = fill(log, 2, value_size=100)
    sl = log.read(0, 1 << 20)
    fill(log, 5, value_size=100)
    assert len(log.segments) > 1
    assert isinstance(sl, FileSlice)
    assert sl.read_bytes() == es[0].data + es[1].data
    r, w = os.pipe()
    try:
        sent = os.sendfile(w, sl.fd, sl.position, sl.length)
        assert os.read(r, sent) == (es[0].data + es[1].data)[:sent]
    finally:
        os.close(r)
        os.close(w)
    log.close()


# ---- recovery ----------------------------------------------------------------------------


def reopened(log: Log, **kw: int) -> Log:
    return Log.open(log.directory, segment_bytes=log.segment_bytes,
                    index_interval_bytes=log.index_interval_bytes, **kw)


def test_clean_reopen_trusts_index_and_removes_marker(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=2000, index_interval_bytes=100)
    fill(log, 100)
    before, leo, index = whole_log_bytes(log), log.log_end_offset, [s.index_entries for s in log.segments]
    log.close()
    log.close()  # idempotent
    assert (tmp_path / CLEAN_SHUTDOWN).exists()
    log = reopened(log)
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    assert log.log_end_offset == leo and whole_log_bytes(log) == before
    assert [s.index_entries for s in log.segments] == index
    fill(log, 3)
    assert log.log_end_offset == leo + 3
    log.close()


def test_clean_reopen_with_empty_last_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=300)
    fill(log, 5, value_size=100)
    log.truncate_to(log.segments[-1].base_offset)
    leo = log.log_end_offset
    assert log.segments[-1].size == 0
    log.close()
    log = reopened(log)
    assert log.log_end_offset == leo
    log.close()
    crash_log = reopened(log)
    crash(crash_log)
    assert reopened(log).log_end_offset == leo


@pytest.mark.parametrize("tail", [
    b"\x00",                                  # a byte of a header
    b"\x00" * 11,                             # a header short of its size field
    entry(1000, b"z" * 50)[:40],              # a partial entry
    struct.pack(">qi", 1000, 1 << 30),       # a size running past the end of the file
    struct.pack(">qi", 1000, 3) + b"abc",    # a size too small to be a message
    os.urandom(300),                          # garbage
])
def test_crash_with_torn_tail_keeps_the_valid_prefix(tmp_path: Path, tail: bytes) -> None:
    log = Log.open(tmp_path, segment_bytes=2000, index_interval_bytes=100)
    fill(log, 60)
    before, leo = whole_log_bytes(log), log.log_end_offset
    last = log.segments[-1].log_path
    crash(log)
    with open(last, "ab") as f:
        f.write(tail)
    log = reopened(log)
    assert log.log_end_offset == leo
    assert whole_log_bytes(log) == before
    es = fill(log, 2)
    assert log.read(leo, 1000).read_bytes() == es[0].data + es[1].data
    log.close()


def test_crash_with_bad_crc_in_last_entry(tmp_path: Path) -> None:
    log = Log.open(tmp_path, index_interval_bytes=100)
    es = fill(log, 30)
    path = log.segments[-1].log_path
    crash(log)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    log = reopened(log)
    assert log.log_end_offset == 29
    assert whole_log_bytes(log) == b"".join(e.data for e in es[:29])
    for offset in range(29):
        assert entries_in(log.read(offset, 100000).read_bytes())[0][1] == offset
    fill(log, 1)
    assert log.log_end_offset == 30
    log.close()


def test_bad_crc_in_the_middle_cuts_there(tmp_path: Path) -> None:
    log = Log.open(tmp_path)
    es = fill(log, 10)
    path = log.segments[-1].log_path
    crash(log)
    raw = bytearray(path.read_bytes())
    raw[sum(len(e.data) for e in es[:4]) + 20] ^= 0x01  # inside entry 4's message
    path.write_bytes(bytes(raw))
    log = reopened(log)
    assert log.log_end_offset == 4
    log.close()


def test_crash_rebuilds_last_index_even_if_stale(tmp_path: Path) -> None:
    log = Log.open(tmp_path, index_interval_bytes=100)
    fill(log, 50)
    seg = log.segments[-1]
    index = seg.index_entries
    crash(log)
    seg.index_path.write_bytes(b"\xff" * 24)  # nonsense, but a multiple of 8
    log = reopened(log)
    assert log.segments[-1].index_entries == index
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_deleted_or_corrupt_index_of_older_segment_is_rebuilt(tmp_path: Path, clean: bool) -> None:
    log = Log.open(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    fill(log, 80)
    segs = log.segments
    assert len(segs) >= 3
    indexes = [s.index_entries for s in segs]
    before, leo = whole_log_bytes(log), log.log_end_offset
    if clean:
        log.close()
    else:
        crash(log)
    segs[0].index_path.unlink()
    segs[1].index_path.write_bytes(segs[1].index_path.read_bytes()[:-3])  # torn
    log = reopened(log)
    assert [s.index_entries for s in log.segments] == indexes
    assert segs[0].index_path.exists()
    assert log.log_end_offset == leo and whole_log_bytes(log) == before
    log.close()


def test_corruption_in_older_segment_drops_later_segments(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=1000)
    fill(log, 60)
    segs = log.segments
    assert len(segs) >= 3
    cut_seg = segs[1]
    crash(log)
    cut_seg.index_path.unlink()  # forces a scan of that segment
    raw = bytearray(cut_seg.log_path.read_bytes())
    first = entries_in(bytes(raw))
    raw[first[2][0] + 30] ^= 0x10
    cut_seg.log_path.write_bytes(bytes(raw))
    log = reopened(log)
    assert [s.base_offset for s in log.segments] == [segs[0].base_offset, cut_seg.base_offset]
    assert log.log_end_offset == cut_seg.base_offset + 2
    assert segment_files(tmp_path) == [f"{segs[0].base_offset:020d}.log", f"{cut_seg.base_offset:020d}.log"]
    log.close()


def test_unclean_reopen_after_appends_following_clean_open(tmp_path: Path) -> None:
    log = Log.open(tmp_path)
    fill(log, 5)
    log.close()
    log = reopened(log)
    fill(log, 5)
    crash(log)
    log = reopened(log)
    assert log.log_end_offset == 10
    log.close()


def test_recovered_active_segment_never_leaves_a_stale_index_behind(tmp_path: Path) -> None:
    """Recovery rebuilds the active segment's indexes in memory and leaves the files to its next
    write (a kill -9 restart of 10,000 partitions spent 41% of its time rewriting them): an index
    file on disk that holds more than what recovery kept is cut at the next clean close."""
    log = Log.open(tmp_path, index_interval_bytes=100)
    fill(log, 40)
    log.close()  # the index file now has points up to the end
    index = tmp_path / f"{0:020d}.index"
    on_disk = index.stat().st_size
    crash(reopened(log))
    seg_file = tmp_path / f"{0:020d}.log"
    with open(seg_file, "r+b") as f:  # only the first half of the segment survived
        f.truncate(seg_file.stat().st_size // 2)
    log = reopened(log)
    kept = log.segments[-1].index_entries
    assert index.stat().st_size == on_disk  # not rewritten by the recovery itself
    assert 0 < len(kept) * 8 < on_disk
    log.close()
    assert index.stat().st_size == len(kept) * 8  # cut at the clean close
    log = reopened(log)  # trusted now
    assert log.segments[-1].index_entries == kept
    assert log.log_end_offset < 40
    fill(log, 1)
    log.close()


def test_orphan_index_removed(tmp_path: Path) -> None:
    (tmp_path / f"{7:020d}.index").write_bytes(b"")
    log = Log.open(tmp_path)
    assert not (tmp_path / f"{7:020d}.index").exists()
    log.close()


# ---- truncation --------------------------------------------------------------------------


def test_truncate_to_across_segments(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=600, index_interval_bytes=100)
    es = fill(log, 40)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    target = bases[1] + 3
    log.truncate_to(target)
    assert log.log_end_offset == target
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert segment_files(tmp_path) == [f"{b:020d}.log" for b in bases[:2]]
    assert whole_log_bytes(log) == b"".join(e.data for e in es[:target])
    assert log.size_bytes == len(whole_log_bytes(log))
    log.flush()  # the truncated segment's index file is cut at its next write
    for seg in log.segments:
        assert all(p < seg.size for _, p in seg.index_entries)
        assert seg.index_path.stat().st_size == 8 * len(seg.index_entries)
    with pytest.raises(OffsetOutOfRange):
        log.read(target + 1, 100)
    more = fill(log, 3)
    assert log.read(target, 10000).read_bytes() == b"".join(e.data for e in more)
    log.truncate_to(1000)  # beyond the end: nothing happens
    assert log.log_end_offset == target + 3
    log.close()
    log = reopened(log)
    assert log.log_end_offset == target + 3
    log.truncate_to(bases[1])  # at a segment base: that segment stays, empty
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert log.log_end_offset == bases[1] and log.segments[-1].size == 0
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    fill(log, 2)
    assert log.log_end_offset == 2
    log.close()


def test_truncate_below_log_start_restarts_there(tmp_path: Path) -> None:
    log = Log.open(tmp_path)
    fill(log, 3)
    log.truncate_to(0)
    log.append(entry(0), 0)
    log.truncate_to(-0)
    assert log.log_end_offset == 0
    log.close()


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    fill(log, 3)
    log.delete()
    assert not (tmp_path / "t-0").exists()


def test_closed_log_refuses_calls(tmp_path: Path) -> None:
    log = Log.open(tmp_path)
    log.close()
    with pytest.raises(ValueError):
        log.read(0, 10)


# ---- model-based ------------------------------------------------------------------------

SEGMENT_BYTES = 700
INTERVAL = 64


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name) / "p"
        self.log = Log.open(self.dir, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
        self.model = Model(SEGMENT_BYTES)

    def teardown(self) -> None:
        if not self.log._closed:
            self.log.close()
        self._tmp.cleanup()

    @rule(shapes=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 250), st.integers(0, 2)),
                          min_size=1, max_size=4),
          data=st.data())
    def append(self, shapes: list[tuple[int, int, int]], data: st.DataObject) -> None:
        es = []
        nxt = self.model.leo
        for count, size, gap in shapes:
            first = nxt + (gap if data.draw(st.integers(0, 9)) == 0 else 0)
            if count == 1:
                raw = entry(first, bytes([first % 256]) * size)
            else:
                raw = wrapper(first, [b"v" * size] + [b"w"] * (count - 1))
            es.append(E(first, first + count - 1, raw))
            nxt = first + count
        self.log.append(b"".join(e.data for e in es), es[-1].last)
        self.model.append(es)

    @rule(data=st.data(), max_bytes=st.integers(0, 1500), min_one=st.booleans(), partial=st.booleans(),
          bounded=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, min_one: bool, partial: bool, bounded: bool) -> None:
        offset = data.draw(st.integers(self.model.start - 1, self.model.leo + 1))
        max_offset = data.draw(st.integers(offset - 1, self.model.leo + 1)) if bounded else None
        try:
            expected = self.model.read(offset, max_bytes, max_offset, min_one, partial)
        except OffsetOutOfRange:
            with pytest.raises(OffsetOutOfRange):
                self.log.read(offset, max_bytes, max_offset, min_one, partial)
            return
        sl = self.log.read(offset, max_bytes, max_offset, min_one, partial)
        assert sl.read_bytes() == expected
        assert sl.length == len(expected)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(0, self.model.start - 1), self.model.leo))
        self.log.truncate_to(offset)
        self.model.truncate(offset)

    @rule()
    def reopen_clean(self) -> None:
        self.log.close()
        self.log = Log.open(self.dir, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)

    @rule(tail=st.binary(max_size=40), flush=st.booleans())
    def reopen_after_crash(self, tail: bytes, flush: bool) -> None:
        if flush:
            self.log.flush()
        path = self.log.segments[-1].log_path
        crash(self.log)
        with open(path, "ab") as f:
            f.write(tail)
        self.log = Log.open(self.dir, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)

    @precondition(lambda self: len(self.log.segments) > 1)
    @rule(data=st.data())
    def crash_and_lose_an_older_index(self, data: st.DataObject) -> None:
        segs = self.log.segments
        victim = segs[data.draw(st.integers(0, len(segs) - 2))]
        crash(self.log)
        victim.index_path.unlink()
        self.log = Log.open(self.dir, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)

    @invariant()
    def matches_model(self) -> None:
        assert self.log.log_end_offset == self.model.leo
        assert self.log.log_start_offset == self.model.start
        assert self.log.size_bytes == self.model.size
        assert [s.base_offset for s in self.log.segments] == [b for b, _ in self.model.segments]


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
