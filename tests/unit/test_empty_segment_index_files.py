"""A segment that holds no bytes needs no index files (broker.log.index_files): closing it creates
none, and opening it without them (clean or after a kill) neither recovers nor rebuilds it; its
files are made by the broker's background pass once it is written to, like a new segment's. A segment that holds
bytes and lacks its index is rebuilt from the log at open, as before (and as Kafka does)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from broker.log import Log
from broker.log.index_files import PendingIndexFiles, make_index_files
from broker.log.open_files import OpenFiles
from broker.log.segment import Segment


def entry(offset: int, value: bytes) -> bytes:
    body = struct.pack(">bbq", 1, 0, 1_700_000_000_000 + offset) + struct.pack(">i", -1)
    body += struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def fill(log: Log, n: int) -> None:
    for _ in range(n):
        off = log.log_end_offset
        log.append(entry(off, bytes([off % 251]) * 60), off)


def open_log(directory: Path, pending: PendingIndexFiles | None = None, clean: bool = False) -> Log:
    return Log.open(directory, segment_bytes=2000, index_interval_bytes=100, open_files=OpenFiles(capacity=8),
                    clean_shutdown=clean, index_files=pending)


def index_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix in (".index", ".timeindex"))


@pytest.fixture
def recoveries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Base offsets of the segments recovered (rebuilt from the log), in order."""
    seen: list[int] = []
    real = Segment.recover

    def counting(self: Segment, cut: bool = True, epochs: list[tuple[int, int]] | None = None) -> tuple[int, int]:
        seen.append(self.base_offset)
        return real(self, cut, epochs)
    monkeypatch.setattr(Segment, "recover", counting)
    return seen


@pytest.mark.parametrize("durable", [True, False])
def test_closing_an_empty_new_segment_creates_no_index_files(tmp_path: Path, durable: bool) -> None:
    log = open_log(tmp_path)
    assert not log.segments[-1].files_made
    log.flush()
    log.close(durable=durable)
    assert index_files(tmp_path) == []
    assert (tmp_path / "00000000000000000000.log").stat().st_size == 0


@pytest.mark.parametrize("clean", [True, False])
def test_an_empty_segment_without_index_files_opens_as_it_is_and_is_pending_once_written(tmp_path: Path, clean: bool,
                                                                            recoveries: list[int]) -> None:
    open_log(tmp_path).close(durable=False)
    pending = PendingIndexFiles()
    with capture_logs() as events:
        log = open_log(tmp_path, pending, clean=clean)
    assert events == []  # no warning: nothing was wrong
    assert recoveries == []  # no recovery, no rebuild scan
    seg = log.segments[-1]
    assert (log.log_end_offset, log.size_bytes, seg.index_entries, len(seg.time_index)) == (0, 0, [], 0)
    assert len(pending) == 0  # not at the open: a restart makes no files for segments never written
    fill(log, 5)  # and it is an ordinary active segment from then on
    assert pending.take() == [seg]  # its first append registered it for the background pass
    assert make_index_files([seg]) == (1, None)
    seg.files_were_made()
    assert index_files(tmp_path) == ["00000000000000000000.index", "00000000000000000000.timeindex"]
    log.close()
    again = open_log(tmp_path, clean=True)
    assert again.log_end_offset == 5 and recoveries == []
    again.close()


def test_an_empty_segment_after_a_roll_base_and_truncation_keeps_its_offsets(tmp_path: Path,
                                                                           recoveries: list[int]) -> None:
    """A log whose active segment is empty at a base above 0 (rolled, then truncated back to the
    roll) reopens at that base without its files and without recovering anything."""
    log = open_log(tmp_path)
    fill(log, 40)
    assert len(log.segments) > 1
    base = log.segments[-1].base_offset
    log.truncate_to(base)
    assert log.segments[-1].size == 0
    log.close(durable=False)
    assert f"{base:020d}.index" not in index_files(tmp_path)  # never made: nothing was left to write
    pending = PendingIndexFiles()
    again = open_log(tmp_path, pending, clean=True)
    assert again.log_end_offset == base and len(pending) == 0
    fill(again, 1)
    assert [s.base_offset for s in pending.take()] == [base]
    assert recoveries == []
    again.close()


@pytest.mark.parametrize("clean", [True, False])
def test_a_non_empty_segment_missing_its_index_is_still_rebuilt(tmp_path: Path, clean: bool,
                                                               recoveries: list[int]) -> None:
    """Missing after a kill: recovered, as before. Missing after a clean close (as a close leaves a
    segment's files out when they would say nothing the entry heads cannot, broker.log.segment):
    rebuilt from the heads, with the same index points, and not validated (the close was clean)."""
    log = open_log(tmp_path)
    fill(log, 10)
    seg = log.segments[-1]
    entries = seg.index_entries
    assert entries
    log.close()
    times = seg.time_index.entries  # with the close's final entry
    seg.index_path.unlink()
    seg.time_index_path.unlink()
    if not clean:
        (tmp_path / ".clean_shutdown").unlink()
    pending = PendingIndexFiles()
    again = open_log(tmp_path, pending, clean=clean)
    assert recoveries == ([] if clean else [0])
    active = again.segments[-1]
    assert again.log_end_offset == 10 and active.index_entries == entries and active.time_index.entries == times
    assert len(pending) == 0  # its files are the close's to write, entries and all
    again.close()
    assert active.index_path.stat().st_size == 8 * len(entries)
    assert active.time_index_path.stat().st_size == 12 * len(times)


def test_a_segment_emptied_after_its_files_were_made_has_them_cut(tmp_path: Path) -> None:
    """Files that exist are kept in step with the segment: a truncation to nothing empties them."""
    log = open_log(tmp_path)
    fill(log, 10)
    log.flush()
    seg = log.segments[-1]
    assert seg.index_path.stat().st_size > 0
    log.truncate_to(0)
    log.close(durable=False)
    assert seg.index_path.stat().st_size == 0 and seg.time_index_path.stat().st_size == 0
