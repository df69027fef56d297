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
  a step before the previous one's end, so such pages (and pages a reader brought back) are
  offered again once;
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


def _load_sync_file_range() -> Any:
    """libc's sync_file_range (Python's os has none), or None off Linux. A CDLL call releases the GIL."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        call = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_sync_file_range = _load_sync_file_range()


def step_for(window: int) -> int:
    """How far the end moves between two rounds: an eighth of the window, within 1-32 MiB, so
    a round's two calls cost nothing next to the megabytes copied between them."""
    return min(_MAX_STEP, max(_MIN_STEP, window // 8 // PAGE * PAGE))


class TailCache:
    """One segment file's marks: writeback started up to `kicked`, pages dropped up to `dropped`.

    Planned under a lock: the segment's writer (the writer thread, or the loop for a follower's
    appends) is one at a time, but the thread's round for its last append may still run when the
    loop appends next."""

    __slots__ = ("kicked", "dropped", "off", "sealed", "_lock")

    def __init__(self) -> None:
        self.kicked = 0
        self.dropped = 0
        self.off = False  # a call failed for this file: left to the kernel from then on
        # The segment this one replaced at a roll, (its file, kicked, dropped, size): its pages
        # up to its last step are dropped at this segment's first round (`Log._roll`).
        self.sealed: tuple[OpenFile, int, int, int] | None = None
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
            self._calls(fd, kick, drop, path, broker_id)

    def _calls(self, fd: int, kick: tuple[int, int] | None, drop: tuple[int, int] | None, path: object,
               broker_id: int | None, sealed: bool = False) -> None:
        try:
            if kick is not None and _sync_file_range is not None:
                if _sync_file_range(fd, kick[0], kick[1], _SYNC_FILE_RANGE_WRITE) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, os.strerror(code))
            if drop is not None:
                os.posix_fadvise(fd, drop[0], drop[1], os.POSIX_FADV_DONTNEED)
        except OSError as e:
            # Not the append's failure: its bytes are in the file. A real I/O error shows again
            # at the next flush, which fails the log as any storage error does (no WAIT flag is
            # passed, so these calls never take the file's error as seen).
            if not sealed:
                self.off = True
            # On the loop, broker_id comes from the bound context; the writer thread passes its own.
            fields = {} if broker_id is None else {"broker_id": broker_id}
            log.warning("log.page_cache_window_off", segment=str(path), error=str(e), sealed=sealed, **fields)
