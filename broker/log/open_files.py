"""The descriptors segment files may hold: a bound, and an LRU of the segments that need none.

A partition keeps one descriptor of its own, its active segment's `.log` (appends, and reads of
the tail, never wait for an open). Older segments keep theirs while they are read, in
least-recently-used order, and give it back when the bound is reached; the next read reopens
the file (`Segment.fd`). Index files hold no descriptor at all: their entries live in memory and
are written by short-lived opens at roll, flush and close (segment.py).

The bound is the project's `log.max.open.segment.files` (Kafka has no such key: a JVM broker
keeps every segment and index open and needs the operator to raise the limit). 0, the default,
derives it from the process's soft RLIMIT_NOFILE: three quarters of it, the rest left to client
and replica connections, ZooKeeper, checkpoints and the short-lived index opens. A new active
segment (a partition opened, a roll) beyond the bound, once nothing is left to evict, fails
with EMFILE before the process itself runs out, so the broker can still accept connections and
answer KAFKA_STORAGE_ERROR for that one partition.

A descriptor is owned by an `OpenFile`; a `FileSlice` handed to a fetch holds the `OpenFile`,
so eviction or a close never pulls a descriptor from under a read in flight (the descriptor is
closed when the last holder lets go, which CPython does at once).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource
import threading
from collections import OrderedDict
from typing import Protocol

# Left for everything that is not a segment file: sockets, ZooKeeper, checkpoints, index writes.
_RESERVE_FRACTION = 4
_MIN_CAPACITY = 16


def soft_nofile_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 1 << 20
    return int(soft)


def derived_capacity(soft_limit: int | None = None) -> int:
    """Three quarters of the soft RLIMIT_NOFILE (15,000 of 20,000), at least 16."""
    soft = soft_nofile_limit() if soft_limit is None else soft_limit
    return max(_MIN_CAPACITY, soft - soft // _RESERVE_FRACTION)


class Evictable(Protocol):
    def release_file(self) -> None: ...


class OpenFile:
    """One descriptor, closed when this object goes (or by `close`, when nothing else holds it)."""

    __slots__ = ("fd", "_pool", "__weakref__")

    def __init__(self, fd: int, pool: OpenFiles) -> None:
        self.fd = fd
        self._pool = pool

    def __del__(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
            with self._pool.lock:
                self._pool.live -= 1


class OpenFiles:
    """The bound on segment descriptors and the LRU of inactive segments holding one."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity if capacity else derived_capacity()
        self.live = 0  # OpenFile objects alive: pinned, idle, or evicted but still held by a slice
        self.opens = 0  # descriptors opened, for the metrics
        self.evictions = 0
        self._idle: OrderedDict[Evictable, None] = OrderedDict()
        # Shutdown closes logs on worker threads (ReplicaManager.stop); everything else runs on
        # the event loop. Reentrant: an eviction drops an OpenFile whose __del__ takes it again.
        self.lock = threading.RLock()

    def configure(self, capacity: int) -> None:
        """`log.max.open.segment.files` (0: derived from the soft RLIMIT_NOFILE); evicts down to it."""
        self.capacity = capacity if capacity > 0 else derived_capacity()
        with self.lock:
            self._evict_to(self.capacity)

    def open(self, path: os.PathLike[str] | str, flags: int) -> OpenFile:
        """A new descriptor for `path`, evicting idle segments first; EMFILE when none can go."""
        with self.lock:
            if self.live >= self.capacity:
                self._evict_to(self.capacity - 1)
                if self.live >= self.capacity:
                    raise OSError(errno.EMFILE, f"Too many open files: {self.live} segment files open, the bound "
                                  f"(log.max.open.segment.files) is {self.capacity} of a soft RLIMIT_NOFILE of "
                                  f"{soft_nofile_limit()}", str(path))
            fd = os.open(path, flags, 0o644)
            self.live += 1
            self.opens += 1
            return OpenFile(fd, self)

    def idle(self, segment: Evictable) -> None:
        """`segment` holds a descriptor it may give back (not an active segment): most recent first to stay."""
        with self.lock:
            idle = self._idle
            if segment in idle:
                idle.move_to_end(segment)
            else:
                idle[segment] = None

    def busy(self, segment: Evictable) -> None:
        """`segment` holds no descriptor any more, or must keep it (it became active)."""
        with self.lock:
            self._idle.pop(segment, None)

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    def _evict_to(self, target: int) -> None:
        idle = self._idle
        while self.live > target and idle:
            segment, _ = idle.popitem(last=False)
            self.evictions += 1
            segment.release_file()


# The process's one pool: RLIMIT_NOFILE is per process. The broker configures it at start-up.
SEGMENT_FILES = OpenFiles()


def sync_file_system(directory: os.PathLike[str] | str) -> None:
    """syncfs(2) on the file system holding `directory` (os.sync() where libc has none): what a
    shutdown does once instead of fsyncing every file of every partition."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        libc = _libc()
        if libc is None or libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _libc() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.syncfs  # noqa: B018 - present on Linux >= 2.6.39
        return lib
    except (OSError, AttributeError):
        return None


def is_descriptor_exhaustion(error: BaseException | None) -> bool:
    """EMFILE (this process, or the bound above) or ENFILE (the system): not a failed disk."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE):
            return True
        error = getattr(error, "error", None) if not isinstance(error, OSError) else None
    return False
