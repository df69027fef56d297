"""broker.log.page_cache: the rounds it plans (pure), and what a real file's page cache holds after
appends through both write paths (the loop's `Log.append`, the writer thread's)."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from broker.config import BrokerConfig, build_config
from broker.log import Log, page_cache
from broker.log.page_cache import DEFAULT_WINDOW_BYTES, PAGE, TailCache, step_for
from broker.log.writer import DirWriter
from tests.support.page_cache import resident_pages, skip_unless_droppable

MiB = 1 << 20
SYNC_FILE_RANGE_WAIT_BEFORE = 1  # <linux/fs.h>


# ---- the plan ----------------------------------------------------------------------------

def test_step_is_an_eighth_of_the_window_within_one_and_32_mib() -> None:
    assert step_for(DEFAULT_WINDOW_BYTES) == 8 * MiB
    assert step_for(256 * MiB) == 32 * MiB
    assert step_for(1 << 30) == 32 * MiB
    assert step_for(16 * MiB) == 2 * MiB
    assert step_for(0) == MiB


def test_writeback_starts_each_step_and_never_takes_the_partial_last_page() -> None:
    cache = TailCache()
    window = 64 * MiB  # step 8 MiB
    assert cache.plan(8 * MiB - 1, window) == (None, None)  # 7 whole MiB and a bit: under a step
    kick, drop = cache.plan(8 * MiB + 100, window)
    assert kick == (0, 8 * MiB) and drop is None  # the page holding bytes 8 MiB.. is still being filled
    assert cache.plan(12 * MiB, window) == (None, None)
    kick, _ = cache.plan(16 * MiB + PAGE + 5, window)
    assert kick == (8 * MiB, 8 * MiB + PAGE)


def test_pages_are_dropped_only_beyond_the_window_and_a_step_at_a_time() -> None:
    cache = TailCache()
    window = 64 * MiB
    for end in range(0, 72 * MiB, MiB):  # the end never passes the window by a whole step
        _, drop = cache.plan(end, window)
        assert drop is None
    _, drop = cache.plan(72 * MiB, window)
    assert drop == (0, 8 * MiB)
    _, drop = cache.plan(100 * MiB + 3, window)
    # Up to the page 64 MiB behind the last whole page, from a step before the last drop's end:
    # pages still dirty then (DONTNEED skips them) are offered again.
    assert drop == (0, 36 * MiB)
    assert cache.dropped == 36 * MiB and cache.kicked == 100 * MiB
    _, drop = cache.plan(120 * MiB, window)
    assert drop == (28 * MiB, 28 * MiB)


def test_a_sealed_segment_keeps_only_its_last_step_and_has_its_last_page_written_back() -> None:
    cache = TailCache()
    window = 64 * MiB  # step 8 MiB
    cache.sealed = (None, 90 * MiB, 30 * MiB, 100 * MiB + 5)  # type: ignore[assignment]  (no file needed)
    file, kick, drop = cache.take_sealed(window)  # type: ignore[misc]
    assert kick == (90 * MiB, 10 * MiB + 5)  # to its very end: nothing more is written to it
    assert drop == (22 * MiB, 70 * MiB)  # a step back from its last drop, up to its last step
    assert cache.sealed is None and cache.take_sealed(window) is None  # once
    cache.sealed = (None, 0, 0, 5 * MiB)  # type: ignore[assignment]  smaller than a step: nothing dropped
    _, kick, drop = cache.take_sealed(window)  # type: ignore[misc]
    assert kick == (0, 5 * MiB) and drop is None


def test_a_file_cut_back_moves_the_marks_back() -> None:
    cache = TailCache()
    cache.plan(100 * MiB, 16 * MiB)
    assert cache.kicked == 100 * MiB and cache.dropped == 84 * MiB
    kick, drop = cache.plan(10 * MiB + 7, 16 * MiB)  # truncated to 10 MiB and a few bytes since
    assert cache.kicked == 10 * MiB and cache.dropped == 10 * MiB
    assert kick is None and drop is None
    kick, _ = cache.plan(12 * MiB, 16 * MiB)
    assert kick == (10 * MiB, 2 * MiB)


def test_the_key_parses_and_a_bad_value_is_refused_naming_it() -> None:
    assert BrokerConfig().log_page_cache_window_bytes == DEFAULT_WINDOW_BYTES
    assert build_config({"broker.id": "0", "log.page.cache.window.bytes": "-1"}, environ={}).log_page_cache_window_bytes == -1
    assert build_config({"broker.id": "0", "log.page.cache.window.bytes": "1048576"}, environ={}).log_page_cache_window_bytes == MiB
    for bad in ("-2", "lots"):
        with pytest.raises(ValueError, match="log.page.cache.window.bytes"):
            build_config({"broker.id": "0", "log.page.cache.window.bytes": bad}, environ={})


# ---- a real file ---------------------------------------------------------------------------

def entry(offset: int, value: bytes) -> bytes:
    """One message-format v1 entry (uncompressed) at `offset`."""
    body = struct.pack(">bbq", 1, 0, 0) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


VALUE = os.urandom(256 * 1024 - 40)  # one entry is 256 KiB: four appends a MiB
WINDOW = 4 * MiB  # step 1 MiB


@pytest.fixture
def droppable_log_dir(tmp_path: Path) -> Path:
    skip_unless_droppable(tmp_path)
    return tmp_path


@pytest.fixture
def log(droppable_log_dir: Path) -> Iterator[Log]:
    lg = Log.open(droppable_log_dir / "t-0", segment_bytes=1 << 30, index_interval_bytes=4096)
    lg.page_cache_window = WINDOW
    yield lg
    if not lg._closed:
        lg.close()


def wait_for_started_writeback(fd: int) -> None:
    """Waits for the writeback under way on the file's pages (libc's call, as the module loads
    it); starts none, so it is not a flush."""
    assert page_cache._sync_file_range is not None, "sync_file_range is Linux's"
    assert page_cache._sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE) == 0


def offsets_in(log: Log) -> list[int]:
    """Every entry's offset, read back from the file (dropped pages come back from the disk)."""
    seg = log.segments[-1]
    data = os.pread(seg.fd, seg.size, 0)
    out, pos = [], 0
    while pos + 12 <= len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        assert data[pos:pos + 12 + size] == entry(offset, VALUE)
        out.append(offset)
        pos += 12 + size
    return out


def check_only_the_window_is_cached(log: Log) -> None:
    seg = log.segments[-1]
    pages = resident_pages(seg.log_path)
    window_pages = WINDOW // PAGE
    behind = pages[:len(pages) - window_pages - 2 * MiB // PAGE]  # beyond the window and a step's slack
    assert behind and not any(behind), f"{sum(behind)} of {len(behind)} pages behind the window still cached"
    assert all(pages[-window_pages:]), "the window behind the end must stay cached for tail readers"


def test_appends_on_the_loop_keep_only_the_window_cached(log: Log) -> None:
    for i in range(64):  # 16 MiB, each append made clean before the next so its pages can go
        log.append(entry(i, VALUE), i)
        log.flush()
    check_only_the_window_is_cached(log)
    assert offsets_in(log) == list(range(64))


async def test_appends_by_the_writer_thread_keep_only_the_window_cached(log: Log, tmp_path: Path) -> None:
    writer = DirWriter(str(tmp_path), broker_id=3)
    for i in range(64):
        e = log.start_append(entry(i, VALUE), i)
        writer.submit(e)
        await log.settle()
        log.flush()
    await writer.close()
    check_only_the_window_is_cached(log)
    assert offsets_in(log) == list(range(64)) and log.log_end_offset == 64


def test_without_a_flush_the_started_writeback_lets_the_pages_go(log: Log) -> None:
    """No fsync: the pages behind the window become clean through the writeback the rounds start
    (each round's sync_file_range WRITE, and DONTNEED, which starts writeback of the range it is
    given before dropping what is clean), and later rounds drop them. The kernel's own writeback
    would wait 30 s (dirty_expire_centisecs).

    After each append the test waits for the writeback already under way (WAIT_BEFORE alone
    starts none), standing in for a disk that keeps up. A writeback slower than the rounds leaves
    its pages cached, as the module says: with the appends back to back and no wait, on a loaded
    machine, 3 MiB behind the window stayed (2026-11-29, the full suite on a fresh machine)."""
    seg = log.segments[-1]
    for i in range(80):
        log.append(entry(i, VALUE), i)
        wait_for_started_writeback(seg.fd)
    check_only_the_window_is_cached(log)
    assert offsets_in(log) == list(range(80))


def test_a_roll_drops_the_sealed_segment_but_its_last_step(droppable_log_dir: Path) -> None:
    lg = Log.open(droppable_log_dir / "t-0", segment_bytes=12 * MiB, index_interval_bytes=4096)
    lg.page_cache_window = WINDOW
    try:
        for i in range(64):  # 16 MiB: one roll at 12 MiB
            lg.append(entry(i, VALUE), i)
            lg.flush()
        first, second = lg.segments
        pages = resident_pages(first.log_path)
        keep = MiB // PAGE  # the step of a 4 MiB window
        assert not any(pages[:-keep - 1]), f"{sum(pages[:-keep - 1])} pages of the sealed segment still cached"
        assert all(pages[-keep:]), "the sealed segment's last step stays for readers at the tail"
        assert second.size > 0 and second.tail_cache is not None and second.tail_cache.sealed is None
    finally:
        lg.close()


def test_minus_one_leaves_the_pages_to_the_kernel(log: Log) -> None:
    log.page_cache_window = -1
    for i in range(32):
        log.append(entry(i, VALUE), i)
        log.flush()
    pages = resident_pages(log.segments[-1].log_path)
    assert all(pages), f"{pages.count(False)} pages dropped with the window off"


def test_a_failing_call_turns_the_window_off_for_that_segment_and_the_append_stands(log: Log) -> None:
    seg = log.segments[-1]
    log.append(entry(0, VALUE), 0)
    bad_fd = os.open(os.devnull, os.O_RDONLY)
    os.close(bad_fd)  # a closed descriptor: both calls fail with EBADF
    with capture_logs() as events:
        seg.follow_cache(bad_fd, 8 * MiB, WINDOW)
    assert seg.tail_cache is not None and seg.tail_cache.off
    assert [e["event"] for e in events] == ["log.page_cache_window_off"]
    log.append(entry(1, VALUE), 1)  # later appends are not refused for it
    assert log.log_end_offset == 2
