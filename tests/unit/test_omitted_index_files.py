"""A close leaves out the index files of an active segment that has no offset-index point (at
most an index interval and one append of bytes) and whose time index holds only the close's final
entry (broker.log.segment, Segment.write_indexes): everything they would say is in the entry heads.
A clean open rebuilds both from those heads, which it reads for the log end offset anyway, and
answers every question (reads, ListOffsets by timestamp, retention's largest timestamps) as a log
whose files were written would; the files are made once they are needed (a roll, an index point).
After a crash the last segment is recovered, as before. 10,000 partitions with a message each made
20,000 index files at a SIGTERM, most of its time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from broker.log import Log
from broker.log import segment as segment_module
from broker.log.index_files import PendingIndexFiles
from broker.log.log import CLEAN_SHUTDOWN
from broker.log.retention import RetentionPolicy, plan_deletion
from broker.log.segment import Segment
from protocol.records.record_batch import build_batch

SEGMENT_BYTES = 2000
INTERVAL = 1000
T0 = 1_700_000_000_000


def append(log: Log, timestamps: list[int], value: bytes = b"x" * 20) -> None:
    base = log.log_end_offset
    data = build_batch([(t, None, value, []) for t in timestamps], base_offset=base)
    log.append(data, base + len(timestamps) - 1)


def until_an_index_point(log: Log) -> None:
    """Appends to the active segment until it has an offset-index point (no roll on the way)."""
    seg = log.segments[-1]
    while not seg.index_entries:
        append(log, [T0 + 100 + log.log_end_offset], value=b"z" * 250)
        assert log.segments[-1] is seg


def open_log(directory: Path, pending: PendingIndexFiles | None = None) -> Log:
    return Log.open(directory, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL, index_files=pending)


def close(log: Log, durable: bool) -> None:
    log.close(durable=durable)
    if not durable:
        log.mark_clean_shutdown()  # as the broker's shutdown does, after its syncfs


def index_files(directory: Path, base: int) -> list[str]:
    return sorted(p.name for p in directory.glob(f"{base:020d}.*index"))


def answers(log: Log) -> list[object]:
    """Everything a reader asks of the indexes."""
    out: list[object] = [log.log_end_offset]
    for offset in range(0, log.log_end_offset, 3):
        s = log.read(offset, 300)
        out.append((s.position, s.length))
    out += [log.offset_for_timestamp(T0 + t) for t in (-5, 0, 3, 17, 40, 41, 55, 1000)]
    out += [(seg.base_offset, seg.size, seg.index_entries, seg.time_index.entries, seg.largest_timestamp)
            for seg in log.segments]
    return out


def recovered_copy(directory: Path, copy: Path) -> Log:
    """The same closed log opened as after a crash (no marker): its last segment rebuilt by recovery."""
    shutil.copytree(directory, copy)
    (copy / CLEAN_SHUTDOWN).unlink()
    log = open_log(copy)
    assert not log.opened_clean
    return log


@pytest.fixture
def recoveries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Base offsets of the segments recovered, in order."""
    seen: list[int] = []
    real = Segment.recover

    def counting(self: Segment, cut: bool = True, epochs: list[tuple[int, int]] | None = None) -> tuple[int, int]:
        seen.append(self.base_offset)
        return real(self, cut, epochs)
    monkeypatch.setattr(Segment, "recover", counting)
    return seen


def several_segments(directory: Path) -> int:
    """A log of a few segments whose last one holds four small batches (no index point): its base."""
    log = open_log(directory)
    for i in range(30):  # out-of-order timestamps within batches, as producers send them
        append(log, [T0 + i * 2 + 1, T0 + i * 2])
    rolled = len(log.segments) + 1
    while len(log.segments) < rolled:  # a new active segment, holding one batch
        append(log, [T0 + 60])
    active = log.segments[-1].base_offset
    for ts in ([T0 + 40, T0 + 41], [T0 + 3], [T0 + 55, T0 + 50]):
        append(log, ts)
    assert log.segments[-1].base_offset == active and log.segments[-1].index_entries == []
    close(log, durable=True)
    return active


@pytest.mark.parametrize("durable", [True, False])
def test_a_close_leaves_out_the_files_of_an_active_segment_without_index_points(tmp_path: Path, durable: bool,
                                                                                recoveries: list[int]) -> None:
    log = open_log(tmp_path / "log")
    for ts in ([T0 + 40, T0 + 41], [T0 + 3], [T0 + 55, T0 + 50]):
        append(log, ts)
    close(log, durable)
    assert index_files(tmp_path / "log", 0) == []
    expected = answers(recovered_copy(tmp_path / "log", tmp_path / "copy"))
    assert recoveries == [0]
    again = open_log(tmp_path / "log")
    assert again.opened_clean and recoveries == [0]  # the clean open recovered nothing
    assert answers(again) == expected
    seg = again.segments[-1]
    assert seg.largest_timestamp == T0 + 55 and seg.time_index.entries[-1].offset == 4  # the batch carrying it
    assert again.offset_for_timestamp(T0 + 42) == (T0 + 55, 3, -1)  # ListOffsets by time, the same answer
    close(again, durable)
    assert index_files(tmp_path / "log", 0) == []  # and left out again


def test_only_the_active_segment_of_a_log_loses_its_files_and_reopens_without_recovery(
        tmp_path: Path, recoveries: list[int]) -> None:
    active = several_segments(tmp_path / "log")
    directory = tmp_path / "log"
    bases = sorted(int(p.stem) for p in directory.glob("*.log"))
    assert len(bases) > 2 and bases[-1] == active
    assert all(len(index_files(directory, b)) == 2 for b in bases[:-1]) and index_files(directory, active) == []
    expected = answers(recovered_copy(directory, tmp_path / "copy"))
    recoveries.clear()
    again = open_log(directory)
    assert recoveries == []
    assert answers(again) == expected


def test_a_roll_makes_the_files_of_a_segment_reopened_without_them(tmp_path: Path, recoveries: list[int]) -> None:
    """Retention and time lookups at the next open read them as any sealed segment's."""
    log = open_log(tmp_path)
    for ts in ([T0 + 40, T0 + 41], [T0 + 3], [T0 + 55, T0 + 50]):
        append(log, ts)
    close(log, durable=False)
    assert index_files(tmp_path, 0) == []
    again = open_log(tmp_path)
    append(again, [T0 + 500], value=b"y" * SEGMENT_BYTES)  # does not fit: a roll first
    assert [s.base_offset for s in again.segments] == [0, 5]
    assert index_files(tmp_path, 0) == ["00000000000000000000.index", "00000000000000000000.timeindex"]
    assert (tmp_path / "00000000000000000000.timeindex").stat().st_size == 12  # its final entry
    close(again, durable=False)
    third = open_log(tmp_path)
    assert recoveries == []
    first = third.segments[0]
    assert first.index_existed and first.time_index_existed
    assert third.segment_stats()[0].largest_timestamp == T0 + 55  # the record's, not the file's mtime
    policy = RetentionPolicy(delete=True, retention_ms=100, retention_bytes=-1)
    hw = third.log_end_offset
    assert plan_deletion(third.segment_stats(), hw, 0, policy, lambda: T0 + 155).count == 0
    assert plan_deletion(third.segment_stats(), hw, 0, policy, lambda: T0 + 156).count == 1
    assert third.offset_for_timestamp(T0 + 42) == (T0 + 55, 3, -1)


def test_an_index_point_after_the_reopen_makes_the_files_at_the_close(tmp_path: Path, recoveries: list[int]) -> None:
    log = open_log(tmp_path / "log")
    append(log, [T0 + 1])
    close(log, durable=False)
    pending = PendingIndexFiles()
    again = open_log(tmp_path / "log", pending)
    assert index_files(tmp_path / "log", 0) == [] and len(pending) == 0  # nothing made at a restart
    until_an_index_point(again)
    seg = again.segments[-1]
    assert pending.take() == [seg]  # its first point: the background pass's to make
    expected = answers(again)  # the final entry the close offers is the last point's already
    close(again, durable=False)
    assert (tmp_path / "log" / "00000000000000000000.index").stat().st_size == 8 * len(seg.index_entries)
    assert (tmp_path / "log" / "00000000000000000000.timeindex").stat().st_size == 12 * len(seg.time_index)
    third = open_log(tmp_path / "log")
    assert recoveries == [] and third.segments[-1].index_existed
    assert answers(third) == expected


def test_a_crash_after_a_reopen_without_files_recovers_the_last_segment(tmp_path: Path,
                                                                         recoveries: list[int]) -> None:
    log = open_log(tmp_path)
    append(log, [T0 + 7, T0 + 9])
    close(log, durable=False)
    again = open_log(tmp_path)
    append(again, [T0 + 20])
    again.abandon()  # a kill: nothing written at close, no marker (the open consumed it)
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    crashed = open_log(tmp_path)
    assert recoveries == [0]
    assert crashed.log_end_offset == 3 and crashed.segments[-1].largest_timestamp == T0 + 20
    assert crashed.offset_for_timestamp(T0 + 8) == (T0 + 9, 1, -1)


def test_a_close_truncates_no_index_file_it_is_not_cutting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncation to 0 of a new index file makes ext4 (auto_da_alloc) flush it at its close:
    files are only cut when they hold more than memory (a truncated log)."""
    log = open_log(tmp_path)
    until_an_index_point(log)
    cuts: list[int] = []
    real = os.ftruncate

    def counting(fd: int, length: int) -> None:
        cuts.append(length)
        real(fd, length)
    monkeypatch.setattr(segment_module.os, "ftruncate", counting)
    log.flush()
    assert cuts == []
    log.truncate_to(1)
    log.close()
    assert cuts  # the log and both files cut back
    again = open_log(tmp_path)
    assert again.log_end_offset == 1
    entries = again.segments[-1].index_entries
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 8 * len(entries)
