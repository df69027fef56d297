"""broker.log.segment.Segment.make_files: a new segment's index files made empty ahead of its
first write_indexes (ReplicaManager's background pass, so a shutdown soon after creating 10,000
partitions writes into them instead of creating 20,000 files), without changing what the
files hold once written nor what a clean reopen reads."""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

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


def _in_a_worker_thread(fn: Callable[[], None]) -> None:
    """`fn` run on another thread, as ReplicaManager's background pass runs make_files."""
    worker = threading.Thread(target=fn)
    worker.start()
    worker.join()


def test_a_partition_deleted_while_its_files_are_made_leaves_no_directory(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker thread's make_files landing while StopReplica(delete) removes the directory
    (between rmtree's listing and its rmdir) must not leave the directory behind, to be opened
    as a partition at the next start."""
    pool = OpenFiles(capacity=8)
    directory = tmp_path / "t-0"
    log = open_log(directory, pool)
    fill(log, 5)
    seg = log.segments[-1]
    assert not seg.files_made
    real_unlink = os.unlink
    interleaved: list[bool] = []

    def unlink_then_worker(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]
        if not interleaved:  # rmtree has listed the directory and is removing its entries
            interleaved.append(True)
            _in_a_worker_thread(seg.make_files)

    monkeypatch.setattr(os, "unlink", unlink_then_worker)
    log.delete()
    monkeypatch.undo()
    assert interleaved
    assert not directory.exists()


def test_a_segment_truncated_away_gets_no_files_made_after(tmp_path: Path) -> None:
    """A follower's truncation deletes the active segment the background pass had picked: the
    pass then creates no orphan index files for it."""
    pool = OpenFiles(capacity=8)
    log = Log.open(tmp_path, segment_bytes=2000, index_interval_bytes=100, open_files=pool)
    fill(log, 40)
    assert len(log.segments) > 1
    picked = log.segments[-1]  # the pass's pick: the active segment, files not made
    assert not picked.files_made
    log.truncate_to(picked.base_offset - 1)
    _in_a_worker_thread(picked.make_files)
    assert not picked.index_path.exists() and not picked.time_index_path.exists()
    log.close()


def test_an_orphan_made_for_a_segment_retention_removed_goes_at_the_next_open(tmp_path: Path) -> None:
    """Retention renames a segment's files `.deleted` while its descriptor stays open (a fetch may
    hold it): a make_files landing after the rename leaves an index pair with no log, which the
    next open removes, clean or not."""
    pool = OpenFiles(capacity=8)
    log = Log.open(tmp_path, segment_bytes=2000, index_interval_bytes=100, open_files=pool)
    fill(log, 40)
    first = log.segments[0]
    gone = log.delete_oldest_segments(1)
    assert gone == [first]
    first.make_files()
    orphans = [first.index_path, first.time_index_path]
    assert all(p.exists() for p in orphans) and not first.log_path.exists()
    log.finish_delete(gone)
    log.close()
    again = Log.open(tmp_path, segment_bytes=2000, index_interval_bytes=100, open_files=pool)
    assert not any(p.exists() for p in orphans)
    assert again.segments[0].base_offset > first.base_offset
    again.close()


def test_an_empty_pair_at_a_new_segments_base_is_not_taken_for_its_index(tmp_path: Path) -> None:
    """An empty index pair appearing at the base of a segment created since (a follower's log
    started again at the same offset) is written over by that segment's first write, whatever
    order the two came in: it never stands for the new segment's entries at a clean reopen."""
    pool = OpenFiles(capacity=8)
    log = Log.open(tmp_path, segment_bytes=2000, index_interval_bytes=100, open_files=pool)
    fill(log, 5)
    log.truncate_fully_and_start_at(0)  # a new segment at the old one's base, files not made
    new = log.segments[-1]
    assert not new.files_made
    for path in (new.index_path, new.time_index_path):  # what a late make_files of the old one would leave
        path.write_bytes(b"")
    fill(log, 40)  # rolls: the new segment's indexes are written whole
    assert len(log.segments) > 1
    entries = [s.index_entries for s in log.segments]
    assert entries[0] and new.index_path.stat().st_size == 8 * len(entries[0])
    log.close()
    again = Log.open(tmp_path, segment_bytes=2000, index_interval_bytes=100, open_files=pool)
    assert [s.index_entries for s in again.segments] == entries
    again.close()
