"""broker.log.segment.Segment.make_files: a new segment's index files made empty ahead of its
first write_indexes (ReplicaManager's background pass, so a shutdown soon after creating 10,000
partitions writes into them instead of creating 20,000 files), without changing what the
files hold once written nor what a clean reopen reads."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from broker.log import Log
from broker.log.open_files import OpenFiles


def entry(offset: int, value: bytes) -> bytes:
    body = struct.pack(">bbq", 1, 0, 1_700_000_000_000 + offset) + struct.pack(">i", -1)
    body += struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def fill(log: Log, n: int) -> dict[int, bytes]:
    out = {}
    for _ in range(n):
        off = log.log_end_offset
        data = entry(off, bytes([off % 251]) * 60)
        log.append(data, off)
        out[off] = data
    return out


def open_log(directory: Path, pool: OpenFiles) -> Log:
    return Log.open(directory, segment_bytes=1 << 20, index_interval_bytes=100, open_files=pool)


def test_files_made_ahead_are_empty_then_written_at_close(tmp_path: Path) -> None:
    pool = OpenFiles(capacity=8)
    log = open_log(tmp_path, pool)
    seg = log.segments[-1]
    assert not seg.files_made
    assert not seg.index_path.exists() and not seg.time_index_path.exists()
    seg.make_files()
    seg.files_were_made()
    assert seg.files_made
    assert seg.index_path.stat().st_size == 0 and seg.time_index_path.stat().st_size == 0
    data = fill(log, 40)
    entries = seg.index_entries
    assert entries  # index points every 100 bytes
    log.close(durable=False)
    assert seg.index_path.stat().st_size == 8 * len(entries)
    assert seg.time_index_path.stat().st_size > 0  # the close's final time entry at least
    again = open_log(tmp_path, pool)
    assert [s.index_entries for s in again.segments] == [entries]
    for off, want in data.items():
        assert again.read(off, len(want)).read_bytes() == want
    again.close()


def test_made_after_the_first_write_the_files_keep_what_they_hold(tmp_path: Path) -> None:
    """The background pass may run after the loop wrote the indexes (a flush): nothing is cut."""
    pool = OpenFiles(capacity=8)
    log = open_log(tmp_path, pool)
    seg = log.segments[-1]
    fill(log, 40)
    log.flush()
    written = seg.index_path.read_bytes(), seg.time_index_path.read_bytes()
    assert written[0]
    seg.make_files()
    seg.files_were_made()
    assert (seg.index_path.read_bytes(), seg.time_index_path.read_bytes()) == written
    entries = seg.index_entries
    log.close(durable=False)
    again = open_log(tmp_path, pool)
    assert [s.index_entries for s in again.segments] == [entries]
    again.close()
