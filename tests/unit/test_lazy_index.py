"""Lazy indexes (issue 21, Kafka's LazyIndex): after a clean shutdown a segment's index files are
read on first use, and every answer is the one an index read at open gives; after a crash (no
marker) the indexes are recovered at open as before."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from broker.log import Log
from broker.log.log import CLEAN_SHUTDOWN
from protocol.records.record_batch import build_batch

SEGMENT_BYTES = 600
INTERVAL = 100


def append(log: Log, timestamps: list[int]) -> None:
    base = log.log_end_offset
    data = build_batch([(t, None, b"x" * 20, []) for t in timestamps], base_offset=base)
    log.append(data, base + len(timestamps) - 1)


def written(directory: Path) -> None:
    """A closed log of several segments, with a time index worth asking."""
    log = Log.open(directory, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    for i in range(40):
        append(log, [i * 10, i * 10 + 5])
    log.close()


def answers(log: Log) -> list[object]:
    """Everything a reader asks of the indexes, in an order that loads them one by one."""
    out: list[object] = [log.log_end_offset]
    for offset in (o for o in (0, 1, 7, 23, 41, 60, 79) if o < log.log_end_offset):
        s = log.read(offset, 200)
        out.append((s.position, s.length))
    out += [log.offset_for_timestamp(t) for t in (-1, 0, 95, 200, 333, 1000)]
    out += [(seg.base_offset, seg.index_entries, seg.time_index.entries, seg.largest_timestamp)
            for seg in log.segments]
    return out


def reopened_pair(tmp_path: Path) -> tuple[Log, Log]:
    """The same closed log opened twice: one left lazy, the other (a copy) with every index
    loaded right after open, before any question, as the open before lazy indexes did."""
    written(tmp_path / "lazy")
    shutil.copytree(tmp_path / "lazy", tmp_path / "eager")
    lazy = Log.open(tmp_path / "lazy", segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    assert lazy.opened_clean
    assert len(lazy.segments) > 3
    assert not any(seg.indexes_loaded for seg in lazy.segments)  # nothing read yet
    eager = Log.open(tmp_path / "eager", segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    for seg in eager.segments:  # loaded now, as before lazy indexes
        seg.index_entries  # noqa: B018
        seg.time_index  # noqa: B018
        assert seg.indexes_loaded
    return lazy, eager


def test_a_lazily_loaded_index_answers_as_an_eager_one(tmp_path: Path) -> None:
    lazy, eager = reopened_pair(tmp_path)
    assert answers(lazy) == answers(eager)
    assert all(seg.indexes_loaded for seg in lazy.segments)
    lazy.close()
    eager.close()


def test_appends_and_truncation_on_lazy_indexes(tmp_path: Path) -> None:
    lazy, eager = reopened_pair(tmp_path)
    for log in (lazy, eager):
        append(log, [900, 905])  # the active segment's time index loads on append
        log.truncate_to(33)  # a middle segment, never touched yet
        append(log, [950])
    assert answers(lazy) == answers(eager)
    for log in (lazy, eager):
        log.close()
    # What the lazy log wrote at close reads back the same after another (clean) open.
    again = Log.open(tmp_path / "lazy", segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    other = Log.open(tmp_path / "eager", segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    assert answers(again) == answers(other)
    again.close()
    other.close()


def test_closing_a_log_never_used_leaves_its_index_files_as_they_were(tmp_path: Path) -> None:
    written(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".index", ".timeindex")}
    log = Log.open(tmp_path, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    log.flush()
    log.close()
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".index", ".timeindex")}
    assert after == before


def test_a_torn_deferred_index_is_rebuilt_from_the_log_on_first_use(tmp_path: Path) -> None:
    written(tmp_path / "good")
    shutil.copytree(tmp_path / "good", tmp_path / "torn")
    first = sorted((tmp_path / "torn").glob("*.index"))[0]
    with open(first, "ab") as f:
        f.write(b"\0\0\0")  # not a whole entry
    good = Log.open(tmp_path / "good", segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    torn = Log.open(tmp_path / "torn", segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    for offset in range(0, good.log_end_offset, 3):
        g, t = good.read(offset, 200), torn.read(offset, 200)
        assert (g.position, g.length) == (t.position, t.length)
    assert first.stat().st_size % 8 == 0  # rewritten at once
    assert torn.log_end_offset == good.log_end_offset
    good.close()
    torn.close()


def test_after_a_crash_indexes_are_rebuilt_at_open(tmp_path: Path) -> None:
    written(tmp_path)
    os.unlink(tmp_path / CLEAN_SHUTDOWN)  # as a kill leaves it
    active = sorted(tmp_path.glob("*.index"))[-1]
    active.write_bytes(b"garbage!" * 3)  # must not be trusted: the active segment is recovered
    log = Log.open(tmp_path, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INTERVAL)
    assert not log.opened_clean
    assert all(seg.indexes_loaded for seg in log.segments)  # nothing deferred
    last = log.segments[-1]
    assert last.index_entries and all(0 < p < last.size for _, p in last.index_entries)
    assert log.log_end_offset == 80
    assert log.read(79, 200).length > 0
    log.close()
