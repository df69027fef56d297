"""The log's two-phase append and the log directory's writer thread (broker.log.writer), on real files."""

from __future__ import annotations

import asyncio
import contextvars
import os
import resource
import signal
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from broker.log import KafkaStorageError, Log
from broker.log.writer import FAILED, WRITTEN, DirWriter, PendingAppend, Unwritten, WriterStopped


def entry(offset: int, value: bytes = b"v") -> bytes:
    """One message-format v1 entry (uncompressed) at `offset`."""
    body = struct.pack(">bbq", 1, 0, 0) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def offsets_in(log: Log) -> list[int]:
    out = []
    for seg in log.segments:
        data = os.pread(seg.fd, seg.size, 0)
        pos = 0
        while pos + 12 <= len(data):
            offset, size = struct.unpack_from(">qi", data, pos)
            out.append(offset)
            pos += 12 + size
    return out


def start(log: Log, writer: DirWriter, offset: int, value: bytes = b"v") -> PendingAppend:
    e = log.start_append(entry(offset, value), offset)
    writer.submit(e)
    return e


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    lg = Log.open(tmp_path / "t-0", segment_bytes=1 << 20, index_interval_bytes=64)
    yield lg
    if not lg._closed:
        lg.close()


async def test_appends_are_seen_only_once_written_and_complete_in_order(log: Log, tmp_path: Path) -> None:
    writer = DirWriter(str(tmp_path), broker_id=7)
    done: list[int] = []
    entries = []
    for i in range(50):
        e = log.start_append(entry(i, b"x" * 100), i)
        e.callback = lambda e: done.append(e.last_offset)
        assert log.next_offset == i + 1
        entries.append(e)
    assert log.log_end_offset == 0  # nothing is submitted yet: nothing is seen
    assert log.read(0, 1 << 20).length == 0
    for e in entries:
        writer.submit(e)
    await log.settle()
    assert done == list(range(50))
    assert log.log_end_offset == 50 and log.next_offset == 50 and log.appends_in_flight == 0
    assert all(e.state == WRITTEN for e in entries)
    assert offsets_in(log) == list(range(50))
    assert log.read(10, 1 << 20).length > 0
    # A synchronous append after them lands after them.
    log.append(entry(50), 50)
    assert offsets_in(log) == list(range(51))
    await writer.close()


async def test_a_synchronous_change_settles_first(log: Log, tmp_path: Path) -> None:
    writer = DirWriter(str(tmp_path))
    for i in range(20):
        start(log, writer, i, b"y" * 1000)
    log.truncate_to(5)  # waits for the 20 writes, then cuts
    assert log.appends_in_flight == 0
    assert log.log_end_offset == 5 and offsets_in(log) == list(range(5))
    for i in range(5, 8):
        start(log, writer, i)
    log.append(entry(8), 8)  # the synchronous append waits for the three before it
    assert offsets_in(log) == list(range(9))
    await writer.close()


async def test_a_roll_waits_for_the_writes_queued_before_it(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", segment_bytes=4096, index_interval_bytes=64)
    writer = DirWriter(str(tmp_path))
    for i in range(40):  # ~1 KiB each: a roll every few appends, between queued writes
        start(log, writer, i, b"z" * 1000)
    await log.settle()
    assert len(log.segments) > 5
    assert offsets_in(log) == list(range(40))
    for seg in log.segments:
        assert seg.size <= 4096
    await writer.close()
    log.close()
    reopened = Log.open(tmp_path / "t-0", segment_bytes=4096, index_interval_bytes=64)
    assert reopened.log_end_offset == 40 and offsets_in(reopened) == list(range(40))
    reopened.close()


@pytest.fixture
def file_size_limit() -> Iterator[int]:
    """Regular files may not grow past 4 MiB (EFBIG), for a write that fails part way."""
    limit = 4 << 20
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def two_logs_and_a_writer(directory: Path) -> tuple[Log, Log, DirWriter]:
    """Two logs of one directory (64 MiB segments) and its writer: one fails, the other queues behind."""
    return (Log.open(directory / "t-0", segment_bytes=64 << 20, index_interval_bytes=4096),
            Log.open(directory / "t-1", segment_bytes=64 << 20, index_interval_bytes=4096),
            DirWriter(str(directory), broker_id=3))


async def test_a_failed_write_is_cut_back_and_what_follows_fails_unwritten(
        tmp_path: Path, file_size_limit: int) -> None:
    log, other, writer = two_logs_and_a_writer(tmp_path)
    big = b"b" * (1 << 20)
    written = [start(log, writer, i, big) for i in range(3)]
    await log.settle()
    size_before = log.segments[-1].size
    # The fourth MiB crosses the limit part way: the thread cuts the file back to its position.
    failing = start(log, writer, 3, big)
    later = start(log, writer, 4)
    elsewhere = other.start_append(entry(0), 0)
    writer.submit(elsewhere)
    await log.settle()
    await other.settle()
    assert all(e.state == WRITTEN for e in written)
    assert failing.state == FAILED and failing.attempted and isinstance(failing.error, OSError)
    assert later.state == FAILED and isinstance(later.error, Unwritten) and not later.attempted
    assert elsewhere.state == FAILED and isinstance(elsewhere.error, Unwritten)
    assert os.path.getsize(log.segments[-1].log_path) == size_before  # cut back
    assert log.log_end_offset == 3 and log.next_offset == 3
    assert other.next_offset == 0 and other.failed is None  # never written: not failed itself
    assert isinstance(log.failed, KafkaStorageError)  # the log whose write failed is
    with pytest.raises(KafkaStorageError):
        log.start_append(entry(3), 3)
    # The directory's writer takes nothing more: a later append fails, unwritten.
    again = other.start_append(entry(0), 0)
    writer.submit(again)
    await other.settle()
    assert again.state == FAILED and isinstance(again.error, Unwritten)
    await writer.close()
    other.close()
    log.close()
    reopened = Log.open(tmp_path / "t-0", segment_bytes=64 << 20, index_interval_bytes=4096)
    assert reopened.log_end_offset == 3
    reopened.close()


async def test_stop_drains_the_queue_refuses_later_appends_and_never_restarts(log: Log, tmp_path: Path) -> None:
    writer = DirWriter(str(tmp_path))
    queued = [start(log, writer, i, b"q" * 10_000) for i in range(30)]
    thread = writer._thread
    await writer.close()
    assert all(e.state == WRITTEN for e in queued)  # queued before the stop: written
    assert log.log_end_offset == 30
    assert thread is not None and not thread.is_alive()
    late = start(log, writer, 30)
    assert writer._thread is thread  # never started again
    await log.settle()
    assert late.state == FAILED and isinstance(late.error, WriterStopped) and not late.attempted
    assert log.next_offset == 30 and log.failed is None  # refused, not a storage failure
    log.close()
    assert offsets_in(Log.open(log.directory)) == list(range(30))


async def test_appends_queued_behind_one_in_flight_at_stop_are_written_then_refused(log: Log, tmp_path: Path) -> None:
    writer = DirWriter(str(tmp_path))
    first = [start(log, writer, i, b"r" * 100_000) for i in range(10)]
    closing = asyncio.ensure_future(writer.close())
    await asyncio.sleep(0)  # the stop is asked for while the thread still has writes queued
    refused = start(log, writer, 10)
    await closing
    await log.settle()
    assert all(e.state == WRITTEN for e in first)
    assert refused.state == FAILED and isinstance(refused.error, WriterStopped)
    assert log.log_end_offset == 10 and log.next_offset == 10
    assert writer._thread is not None and not writer._thread.is_alive()


async def test_an_unexpected_error_in_the_thread_fails_the_entries_and_is_reported(
        log: Log, tmp_path: Path) -> None:
    writer = DirWriter(str(tmp_path), broker_id=5)
    ok = start(log, writer, 0)
    await log.settle()
    bad = log.start_append(entry(1), 1)
    bad.data = [0] * len(bad.data)  # type: ignore[assignment]  # not a buffer: the thread's write raises TypeError
    writer.submit(bad)
    await log.settle()
    assert ok.state == WRITTEN
    assert bad.state == FAILED and isinstance(bad.error, OSError)
    assert not writer.accepting
    assert writer._thread is not None and not writer._thread.is_alive()
    assert log.failed is not None  # its bytes may be in the file: the log takes no more
    assert log.log_end_offset == 1 and log.next_offset == 1


async def test_settle_now_blocks_until_the_writes_are_done(log: Log, tmp_path: Path) -> None:
    writer = DirWriter(str(tmp_path))
    entries = [start(log, writer, i, b"s" * 50_000) for i in range(20)]
    log.settle_now()  # no await: the loop waits on the thread, then completes them in order
    assert all(e.state == WRITTEN for e in entries)
    assert log.log_end_offset == 20 and log.appends_in_flight == 0
    await writer.close()


async def test_a_completion_that_raises_fails_the_entry_and_still_releases_its_waiters(
        log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = DirWriter(str(tmp_path))
    seen: list[int] = []

    def broken(entry: PendingAppend) -> None:
        raise RuntimeError("a bug in append_done")

    e = log.start_append(entry(0), 0)
    e.callback = lambda e: seen.append(e.state)
    monkeypatch.setattr(log, "append_done", broken)
    waiter = asyncio.get_running_loop().create_future()
    e.waiters = [waiter]
    writer.submit(e)
    await asyncio.wait_for(waiter, 5)  # released although append_done raised
    assert seen == [FAILED] and e.state == FAILED and isinstance(e.error, OSError)
    with pytest.raises(RuntimeError):  # the broken append_done left it in flight: no endless settle
        log.settle_now()
    log._in_flight.clear()
    log._in_flight_bytes = 0
    await writer.close()


def test_a_completion_into_a_segment_no_longer_active_raises(log: Log) -> None:
    e = log.start_append(entry(0), 0)
    e.segment = log.segments[0].__class__.__new__(log.segments[0].__class__)  # as if the log had rolled under it
    e.state = WRITTEN
    with pytest.raises(RuntimeError):
        log.append_done(e)
    assert log.log_end_offset == 0 and log.appends_in_flight == 0


async def test_the_idle_thread_holds_no_entry(log: Log, tmp_path: Path) -> None:
    import sys
    import time as _time
    writer = DirWriter(str(tmp_path))
    start(log, writer, 0)
    await log.settle()
    thread = writer._thread
    assert thread is not None and thread.ident is not None
    deadline = _time.monotonic() + 5
    while True:  # until it waits for the next entries
        frame = sys._current_frames().get(thread.ident)
        while frame is not None and frame.f_code.co_name != "_run":
            frame = frame.f_back
        if frame is not None and frame.f_locals.get("group") == [] and "entry" not in frame.f_locals:
            break
        assert _time.monotonic() < deadline, "the thread still holds the last entry"
        await asyncio.sleep(0.01)
    await writer.close()


async def test_a_thread_that_cannot_start_fails_the_writer_and_its_entries(
        log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    writer = DirWriter(str(tmp_path))
    monkeypatch.setattr(threading.Thread, "start", refuse)
    e = start(log, writer, 0)
    await asyncio.wait_for(log.settle(), 5)  # does not wait for a thread that never ran
    assert e.state == FAILED and isinstance(e.error, OSError)
    assert not writer.accepting and writer._thread is None
    later = start(log, writer, 0)  # refused at once, no thread tried again
    await asyncio.wait_for(log.settle(), 5)
    assert later.state == FAILED and isinstance(later.error, Unwritten)
    await asyncio.wait_for(writer.close(), 5)
    assert log.log_end_offset == 0


async def test_a_roll_after_appends_that_failed_unwritten_raises_and_does_not_roll(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", segment_bytes=1024, index_interval_bytes=64)
    writer = DirWriter(str(tmp_path))
    writer._failed = OSError(5, "EIO")  # an earlier write of the directory failed
    refused = start(log, writer, 0, b"x" * 600)
    with pytest.raises(KafkaStorageError):
        log.start_append(entry(1, b"y" * 600), 1)  # would roll: settles first, finds offset 0 again
    assert refused.state == FAILED and isinstance(refused.error, Unwritten)
    assert len(log.segments) == 1 and log.next_offset == 0 and log.appends_in_flight == 0
    log.close()
    await writer.close()


_WHO = contextvars.ContextVar("who", default="a context of its own")


async def test_completions_run_in_the_loops_context(log: Log, tmp_path: Path) -> None:
    """The thread schedules each completion pass in the context of the loop that submitted
    (structlog's bound broker_id lives there): an event a completion logs, log_dir.failed
    included, names the broker; the thread's own context has nothing bound."""
    _WHO.set("the loop")
    writer = DirWriter(str(tmp_path), broker_id=7)
    seen: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    e = log.start_append(entry(0), 0)
    e.callback = lambda e: seen.set_result(_WHO.get())
    writer.submit(e)
    assert await asyncio.wait_for(seen, 5) == "the loop"
    await writer.close()


async def test_a_completion_pass_logs_at_debug_what_went_through_the_thread(
        tmp_path: Path, file_size_limit: int) -> None:
    log, other, writer = two_logs_and_a_writer(tmp_path)
    big = b"b" * (1 << 20)
    with capture_logs() as events:
        for i in range(3):
            start(log, writer, i, big)
        await log.settle()
        start(log, writer, 3, big)  # crosses the 4 MiB limit: fails
        start(log, writer, 4)
        writer.submit(other.start_append(entry(0), 0))
        await log.settle()
        await other.settle()
    passes = [ev for ev in events if ev["event"] == "log_writer.completed"]
    assert all(ev["log_level"] == "debug" and ev["broker_id"] == 3 for ev in passes)
    assert sum(ev["appends"] for ev in passes) == 6
    assert sum(ev["written"] for ev in passes) == 3
    assert sum(ev["bytes"] for ev in passes) == 3 * len(entry(0, big))
    assert sum(ev["unwritten"] for ev in passes) == 2  # behind the failed write: never attempted
    await writer.close()
    log.close()
    other.close()
