"""broker.log.open_files with real logs on disk: descriptors bounded, older segments reopened on
demand, slices kept readable through an eviction, EMFILE (not a failed log) when nothing can go."""

from __future__ import annotations

import errno
import os
import struct
import zlib
from pathlib import Path

import pytest

from broker.log import KafkaStorageError, Log
from broker.log.open_files import OpenFiles, derived_capacity, is_descriptor_exhaustion


def entry(offset: int, value: bytes) -> bytes:
    body = struct.pack(">bbq", 1, 0, 0) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def fill(log: Log, n: int, size: int = 60) -> dict[int, bytes]:
    out = {}
    for _ in range(n):
        off = log.log_end_offset
        data = entry(off, bytes([off % 251]) * size)
        log.append(data, off)
        out[off] = data
    return out


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_only_active_segments_and_recent_reads_hold_descriptors(tmp_path: Path) -> None:
    pool = OpenFiles(capacity=8)
    base = open_fds()
    logs = [Log.open(tmp_path / f"p{i}", segment_bytes=400, index_interval_bytes=100, open_files=pool)
            for i in range(4)]
    written = [fill(log, 40) for log in logs]  # ~8 segments each: 32 segment files in all
    assert all(len(log.segments) >= 6 for log in logs)
    # Index files hold none; segment files at most the bound (4 active + 4 recently used).
    assert pool.live <= 8
    assert open_fds() - base <= 8
    # Every byte reads back, from the first segment of each log on: evicted files reopen.
    for log, data in zip(logs, written, strict=True):
        for off, want in data.items():
            assert log.read(off, len(want)).read_bytes() == want
        assert pool.live <= 8 and open_fds() - base <= 8
    assert pool.evictions > 0
    # The active segments never gave theirs up.
    assert all(log.segments[-1].has_descriptor for log in logs)
    for log in logs:
        log.close()
    assert pool.live == 0 and open_fds() <= base


def test_a_slice_outlives_the_eviction_of_its_segment(tmp_path: Path) -> None:
    pool = OpenFiles(capacity=3)
    a = Log.open(tmp_path / "a", segment_bytes=400, index_interval_bytes=100, open_files=pool)
    data = fill(a, 20)
    sl = a.read(0, 200)  # in the first segment, now inactive
    pool.configure(1)  # evicts every idle segment, the one the slice reads included
    assert not a.segments[0].has_descriptor and pool.idle_count == 0
    assert sl.read_bytes() == (data[0] + data[1] + data[2])[:200]
    fd = sl.fd
    del sl  # the last holder lets go: the descriptor closes
    with pytest.raises(OSError):
        os.fstat(fd)
    pool.configure(3)  # closing flushes the rolled segments, which reopen them
    a.close()


def test_no_descriptor_left_is_emfile_for_that_call_only(tmp_path: Path) -> None:
    pool = OpenFiles(capacity=2)
    a = Log.open(tmp_path / "a", open_files=pool)
    b = Log.open(tmp_path / "b", open_files=pool)
    with pytest.raises(KafkaStorageError) as err:
        Log.open(tmp_path / "c", open_files=pool)
    assert err.value.error.errno == errno.EMFILE and is_descriptor_exhaustion(err.value)
    assert "log.max.open.segment.files" in str(err.value)
    # The logs that are open go on; the one refused opens once a descriptor is free.
    fill(a, 3)
    b.close()
    c = Log.open(tmp_path / "c", open_files=pool)
    fill(c, 2)
    assert c.log_end_offset == 2
    # A read of an evicted segment that finds no descriptor fails that read alone.
    pool2 = OpenFiles(capacity=4)
    small = Log.open(tmp_path / "d", segment_bytes=200, open_files=pool2)
    small.append(entry(0, b"x" * 150), 0)
    small.append(entry(1, b"y" * 150), 1)  # rolled: segment 0 is idle, and holds a descriptor
    held = [Log.open(tmp_path / f"h{i}", open_files=pool2) for i in range(3)]  # evicts it, fills the pool
    assert not small.segments[0].has_descriptor
    with pytest.raises(KafkaStorageError) as err:
        small.read(0, 1000)
    assert is_descriptor_exhaustion(err.value) and small.failed is None
    held.pop().close()
    assert small.read(0, 1000).read_bytes() == entry(0, b"x" * 150)
    small.append(entry(2, b"z" * 10), 2)
    for log in (a, c, small, *held):
        log.close()


def test_clean_reopen_after_lazy_indexes(tmp_path: Path) -> None:
    """Index points written only at roll and close are what the next open trusts."""
    pool = OpenFiles(capacity=4)
    log = Log.open(tmp_path, segment_bytes=1000, index_interval_bytes=100, open_files=pool)
    data = fill(log, 60)
    entries = [s.index_entries for s in log.segments]
    log.close()
    again = Log.open(tmp_path, segment_bytes=1000, index_interval_bytes=100, open_files=pool)
    assert [s.index_entries for s in again.segments] == entries
    for off, want in data.items():
        assert again.read(off, len(want)).read_bytes() == want
    again.close()


def test_derived_capacity_leaves_a_quarter() -> None:
    assert derived_capacity(20_000) == 15_000
    assert derived_capacity(10) == 16
