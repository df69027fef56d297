"""How much page cache a segment being written keeps behind its end (`log.page.cache.window.bytes`).

A project key; Kafka has none. Kafka leaves a log's pages to the kernel: every appended byte
stays cached until memory pressure evicts it, so a busy partition fills memory with pages only a
reader far behind would use, and each new write needs a page the kernel has to find. On a
virtual machine whose host takes back the memory its guest frees (virtio free page reporting, as
on the machines this project is measured on), a page that is not one the guest freed a moment ago
must be supplied by the host again. A plain `write` loop into one new file, no broker involved
(2026-11-25): 0.25-0.4 ms of system time per MB for the first ~1 GB, then 2.2-5.2 ms per MB; with
the pages behind a 256 MB window dropped as below, 0.3-0.45 ms per MB over all 4 GB.

So, for the segment file being appended to:
- every `step` bytes, writeback of the whole pages written since the last time is started
  (`sync_file_range(SYNC_FILE_RANGE_WRITE)`: it does not wait for the disk, like RocksDB's
  bytes_per_sync; the last, partial page is left alone, as the next append writes into it);
- pages more than `window` bytes behind the end are dropped from the cache
  (`posix_fadvise(POSIX_FADV_DONTNEED)`). The kernel drops only clean pages, so a page whose
  writeback has not finished simply stays cached: nothing unwritten is dropped. Each drop starts
  a step before the previous one's end, so pages a reader brought back are offered again once;
  and the pages a drop left cached are read back right after it (`mincore`) and offered again at
  later rounds, up to a step of them a round, furthest behind first, until they are gone or
  `_RETRY_SECONDS` have passed, so a writeback slower than the rounds (a busy disk, or appends
  faster than it writes) delays a drop but does not leave the pages to the kernel. Only those pages are offered again, never a range around them:
  a reader far behind the window keeps what it has just read;
- at a roll, the sealed segment has writeback started to its end and its pages dropped but for
  its last step, at the new segment's first append (its file object held until then, so an
  eviction from the descriptor pool cannot close it under the call). (A page whose
  writeback failed is clean too, and the kernel could evict it under pressure just the same; the
  failure stays recorded for the file and the next flush reports it, failing the log.)

New writes then reuse pages just freed. Readers that keep up (consumers at the tail, followers)
read within the window from the cache; a reader further behind reads from the disk, and what it
reads is cached again for the kernel to manage. Durability is unchanged: neither call is a flush
(fsync stays with log.flush.* and the clean close), and neither waits for the disk, unless the
device's queue is full, when starting writeback blocks the writing thread (the leader's writer
thread, or the loop for a follower's append) until it has room. Measured here: starting
writeback of 32 MiB takes about 1 ms, dropping 32 MiB of clean pages about 1.7 ms (0.25 and
0.5 ms for 8 MiB); the writer thread makes them after handing its writes back, so no
acknowledgement waits for them; a follower makes them on its loop, once a step.

-1 turns all of this off: the kernel decides, as under Kafka. A failing call (a filesystem that
does not take it) turns it off for that segment, with one warning; the append itself never fails
for it.

Pure plan (`TailCache.plan`, no I/O) and the two system calls (`TailCache.follow`) are kept apart
so the rules are tested without a disk.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from broker.log.open_files import OpenFile

log = structlog.get_logger()

# 64 MiB: far more than a reader keeping up is behind, and little fresh memory per partition
# before the first drop (bench.produce_load on this VM, 8 partitions after Tansu's phases: 8.4 M
# msg/s with 64 MiB against 4.5-5.6 M with 256 MiB, when 8 x 256 MiB of cache came from the host).
DEFAULT_WINDOW_BYTES = 64 << 20
DISABLED = -1
PAGE = mmap.PAGESIZE
_MAX_STEP = 32 << 20
_MIN_STEP = 1 << 20
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>
# Pages a drop left cached are offered again at every round for this long: well past the
# kernel's own writeback of dirty pages (dirty_expire_centisecs, 30 s), after which whatever
# still holds them (a mapping, a reader at them all along) is left to the kernel.
_RETRY_SECONDS = 120.0
# At most this many page runs are waiting to be offered again; a run that does not fit is left
# to the kernel. Runs closer than a gap of `_MERGE_GAP` are offered as one.
_MAX_RETRY_RUNS = 64
_MERGE_GAP = 256 << 10
# The page cache keeps a file in folios, naturally aligned, of up to 2 MiB (the PMD size on
# x86-64), and DONTNEED drops a folio only if the range covers all of it: a run offered again is
# cut only at multiples of this, and a round offers at least this much of them.
_FOLIO_ALIGN = 2 << 20
_MAP_FAILED = ctypes.c_void_p(-1).value


def _load_libc() -> Any:
    """libc with use_errno, or None off Linux. A CDLL call releases the GIL."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


def _load_sync_file_range(libc: Any) -> Any:
    """libc's sync_file_range (Python's os has none), or None off Linux."""
    call = getattr(libc, "sync_file_range", None)
    if call is None:
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


def _load_mincore(libc: Any) -> tuple[Any, Any, Any] | None:
    """libc's mmap, munmap and mincore (Python's mmap module exposes no mincore), or None."""
    try:
        mmap_, munmap, mincore = libc.mmap, libc.munmap, libc.mincore
    except AttributeError:
        return None
    mmap_.restype = ctypes.c_void_p
    mmap_.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return mmap_, munmap, mincore


_libc = _load_libc()
_sync_file_range = _load_sync_file_range(_libc) if _libc is not None else None
_mincore_calls = _load_mincore(_libc) if _libc is not None else None
# mincore's vector: bit 0 of each byte says the page is cached; the other bits are reserved.
_LOW_BIT = bytes(b & 1 for b in range(256))


def resident_runs(fd: int, offset: int, length: int) -> list[tuple[int, int]] | None:
    """The runs of pages of `fd` in [offset, offset + length) that are in the page cache, as
    (offset, length), from mincore over a read-only shared mapping (which faults nothing in);
    None if that cannot be told. `offset` is page-aligned."""
    if _mincore_calls is None or length <= 0:
        return None
    mmap_, munmap, mincore = _mincore_calls
    addr = mmap_(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    if addr is None or addr == _MAP_FAILED:
        return None
    try:
        vec = ctypes.create_string_buffer((length + PAGE - 1) // PAGE)
        if mincore(addr, length, vec) != 0:
            return None
    finally:
        munmap(addr, length)
    bits = vec.raw.translate(_LOW_BIT)
    runs: list[tuple[int, int]] = []
    start = bits.find(1)
    while start >= 0:
        stop = bits.find(0, start)
        if stop < 0:
            stop = len(bits)
        runs.append((offset + start * PAGE, min((stop - start) * PAGE, length - start * PAGE)))
        start = bits.find(1, stop)
    return runs


def merged(runs: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """(offset, length, give-up time) runs sorted and joined where they overlap or lie closer
    than `_MERGE_GAP` (a joined run keeps the later time), at most `_MAX_RETRY_RUNS` of them:
    the ones furthest behind, which have waited longest. Pure."""
    out: list[tuple[int, int, float]] = []
    for off, length, until in sorted(runs):
        if out:
            last_off, last_len, last_until = out[-1]
            if off <= last_off + last_len + _MERGE_GAP:
                end = max(last_off + last_len, off + length)
                out[-1] = (last_off, end - last_off, max(last_until, until))
                continue
        out.append((off, length, until))
    return out[:_MAX_RETRY_RUNS]


def step_for(window: int) -> int:
    """How far the end moves between two rounds: an eighth of the window, within 1-32 MiB, so
    a round's two calls cost nothing next to the megabytes copied between them."""
    return min(_MAX_STEP, max(_MIN_STEP, window // 8 // PAGE * PAGE))


class TailCache:
    """One segment file's marks: writeback started up to `kicked`, pages dropped up to `dropped`.

    Planned under a lock: the segment's writer (the writer thread, or the loop for a follower's
    appends) is one at a time, but the thread's round for its last append may still run when the
    loop appends next."""

    __slots__ = ("kicked", "dropped", "off", "sealed", "skipped", "_lock")

    def __init__(self) -> None:
        self.kicked = 0
        self.dropped = 0
        self.off = False  # a call failed for this file: left to the kernel from then on
        # The segment this one replaced at a roll, (its file, kicked, dropped, size): its pages
        # up to its last step are dropped at this segment's first round (`Log._roll`).
        self.sealed: tuple[OpenFile, int, int, int] | None = None
        # Page runs a drop left cached (still dirty or under writeback then), to offer again:
        # (offset, length, monotonic time to give up at).
        self.skipped: list[tuple[int, int, float]] = []
        self._lock = threading.Lock()

    def plan(self, end: int, window: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """The (offset, length) to start writeback of and the one to drop, with the file's bytes
        now ending at `end`; the marks move as if both were done. Pure.

        A drop starts a step before the last one's end: pages that were still dirty or under
        writeback then, or read back into the cache by a reader since, are offered again."""
        with self._lock:
            whole = end - end % PAGE  # the pages no later append writes into
            kicked, dropped = self.kicked, self.dropped
            if whole < kicked or whole < dropped:  # the file was cut back (truncation)
                kicked, dropped = min(kicked, whole), min(dropped, whole)
            step = step_for(window)
            kick = drop = None
            if whole - kicked >= step:
                kick = (kicked, whole - kicked)
                kicked = whole
            behind = whole - window
            behind -= behind % PAGE
            if behind - dropped >= step:
                start = max(0, dropped - step)
                drop = (start, behind - start)
                dropped = behind
            self.kicked, self.dropped = kicked, dropped
            return kick, drop

    def take_sealed(self, window: int) -> tuple[OpenFile, tuple[int, int] | None, tuple[int, int] | None] | None:
        """The rolled-away segment's last round, once: writeback of what it has not had started
        (its last page included: nothing more is written to it), and its pages dropped but for
        its last step, which readers at the tail may still be reading. Pure."""
        with self._lock:
            sealed, self.sealed = self.sealed, None
        if sealed is None:
            return None
        file, kicked, dropped, size = sealed
        keep = step_for(window)
        kick = (kicked, size - kicked) if size > kicked else None
        upto = size - keep
        upto -= upto % PAGE
        start = max(0, dropped - keep)
        drop = (start, upto - start) if upto > start else None
        return file, kick, drop

    def take_skipped(self, end: int, now: float, budget: int) -> list[tuple[int, int, float]]:
        """The runs to offer again this round, at most `budget` bytes of them, furthest behind
        first (writeback finishes roughly in file order); the rest wait for the next rounds.
        Runs given up on, or beyond the file's `end` (cut back since), are forgotten. Pure."""
        whole = end - end % PAGE
        with self._lock:
            runs = [(off, min(length, whole - off), until) for off, length, until in self.skipped
                    if until > now and off < whole]
            taken: list[tuple[int, int, float]] = []
            while runs and budget > 0:
                off, length, until = runs[0]
                piece = length if length <= budget else (off + budget) // _FOLIO_ALIGN * _FOLIO_ALIGN - off
                if piece <= 0:
                    break
                taken.append((off, piece, until))
                budget -= piece
                if piece == length:
                    runs.pop(0)
                else:
                    runs[0] = (off + piece, length - piece, until)
            self.skipped = runs
        return taken

    def keep_skipped(self, runs: list[tuple[int, int, float]]) -> None:
        """Runs a drop left cached, offered again at the next rounds. Pure."""
        if runs:
            with self._lock:
                self.skipped = merged(self.skipped + runs)

    def follow(self, fd: int, end: int, window: int, path: object = None, broker_id: int | None = None) -> None:
        """After an append made the file `fd` end at `end`: the round `plan` says, if any, and
        the sealed segment's, if this is the first since a roll."""
        if window < 0:
            return
        sealed = self.take_sealed(window) if self.sealed is not None else None
        if sealed is not None:
            file, kick, drop = sealed
            self._calls(file.fd, kick, drop, path, broker_id, sealed=True)
        if self.off:
            return
        kick, drop = self.plan(end, window)
        if kick is not None or drop is not None:
            # Pages skipped by earlier drops are offered again only at a round, so a partition
            # being written costs these calls once a step, whatever its appends' sizes; and at
            # most a step of them a round, so a disk far behind (every page skipped, hundreds of
            # MB) costs each round one more step's mincore, not a pass over all of them.
            budget = max(step_for(window), 2 * _FOLIO_ALIGN)
            retry = self.take_skipped(end, time.monotonic(), budget) if self.skipped else []
            self._calls(fd, kick, drop, path, broker_id, retry=retry)

    def _calls(self, fd: int, kick: tuple[int, int] | None, drop: tuple[int, int] | None, path: object,
               broker_id: int | None, sealed: bool = False,
               retry: list[tuple[int, int, float]] | None = None) -> None:
        try:
            if kick is not None and _sync_file_range is not None:
                if _sync_file_range(fd, kick[0], kick[1], _SYNC_FILE_RANGE_WRITE) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, os.strerror(code))
            offered = list(retry or ())
            if drop is not None:
                offered.append((drop[0], drop[1], time.monotonic() + _RETRY_SECONDS))
            for off, length, _ in offered:
                os.posix_fadvise(fd, off, length, os.POSIX_FADV_DONTNEED)
            if not sealed:
                # What stayed cached was dirty or under writeback: offered again next round.
                left: list[tuple[int, int, float]] = []
                for off, length, until in offered:
                    runs = resident_runs(fd, off, length)
                    left.extend((o, n, until) for o, n in runs or ())
                self.keep_skipped(left)
        except OSError as e:
            # Not the append's failure: its bytes are in the file. A real I/O error shows again
            # at the next flush, which fails the log as any storage error does (no WAIT flag is
            # passed, so these calls never take the file's error as seen).
            if not sealed:
                self.off = True
            # On the loop, broker_id comes from the bound context; the writer thread passes its own.
            fields = {} if broker_id is None else {"broker_id": broker_id}
            log.warning("log.page_cache_window_off", segment=str(path), error=str(e), sealed=sealed, **fields)
