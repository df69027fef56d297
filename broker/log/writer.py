"""One writer thread per log directory: leader Produce appends copied into the page cache off the loop.

A leader's append is two-phase (broker.log.log.Log.start_append): on the event loop the batch is
validated, numbered and given its place (`PendingAppend`); this thread makes its `os.write` (the
copy into the page cache, which releases the GIL, ~half a produce's CPU); then, on the loop
again and in the order the appends were queued, `Log` takes the bytes as written (size, index
points, log end offset) and the append's callback answers it. So the loop validates the next
request while the previous one's bytes are copied, and nothing is acknowledged, nor seen by a
reader, a follower or the high watermark, before its bytes are in the file.

The thread only writes: a FIFO of entries, each (file, bytes, position). It reports what it
finished with one `call_soon_threadsafe` per group it drained, not per entry. A segment file is
opened O_APPEND, so the FIFO order is the file order; the position is what a failure cuts back to.

Failure: a write that fails (ENOSPC, EIO) is cut back (`ftruncate` to its position) by the thread,
and every entry queued after it in this directory fails unwritten, as does every entry submitted
later: the replica manager answers them KAFKA_STORAGE_ERROR and takes the directory offline
(`fail_dir`). Anything unexpected in the thread is caught, logged and handled the same way, so the
thread never dies silently leaving appends unanswered.

Stop (the broker's shutdown): the entries already queued are written, the thread exits, and from
then on every submission is refused (`WriterStopped`) without a thread ever starting again; the
logs close only after `close()` returned. A refused entry is failed in queue order, after the
entries before it, so a log's appends always complete in the order they were started.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from broker.log.open_files import OpenFile

if TYPE_CHECKING:
    from broker.log.log import Log
    from broker.log.segment import Segment

log = structlog.get_logger()

QUEUED, WRITTEN, FAILED = 0, 1, 2
# Buffers one writev takes (Linux's IOV_MAX).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


class WriterStopped(OSError):
    """The broker is stopping: the append was refused, nothing written."""

    def __init__(self, directory: str) -> None:
        super().__init__(errno.ESHUTDOWN, "log writer stopped", directory)


class Unwritten(OSError):
    """An earlier append of this directory failed: this one was not attempted."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(errno.EIO, f"not written: an earlier append of the directory failed ({cause})")


class PendingAppend:
    """One append between `Log.start_append` and its completion on the loop."""

    __slots__ = ("log", "segment", "file", "data", "position", "first_key", "last_offset", "state",
                 "error", "attempted", "callback", "waiters", "writer")

    def __init__(self, log: Log, segment: Segment, file: OpenFile, data: bytes | bytearray | memoryview, position: int,
                 first_key: int, last_offset: int) -> None:
        self.log = log
        self.segment = segment
        self.file = file  # holds the descriptor open while the write is queued
        self.data = data
        self.position = position
        self.first_key = first_key  # the log's next offset before it
        self.last_offset = last_offset
        self.state = QUEUED  # set by the thread under the writer's lock
        self.error: OSError | None = None
        self.attempted = False  # its write was tried (a failed one that was not is `Unwritten`)
        self.callback: Callable[[PendingAppend], None] | None = None
        self.waiters: list[asyncio.Future[None]] | None = None
        self.writer: DirWriter | None = None

    @property
    def size(self) -> int:
        return len(self.data)


class DirWriter:
    """The writer thread of one log directory and its FIFO (see the module docstring)."""

    def __init__(self, directory: str, broker_id: int = -1) -> None:
        self.directory = directory
        self.broker_id = broker_id
        self._cond = threading.Condition()
        self._queue: deque[PendingAppend] = deque()  # guarded by _cond
        # Finished by the thread (or refused), to be completed on the loop in this order. Appended
        # under _cond; popped only on the loop, one at a time (a completion may settle a log,
        # which completes further entries from within).
        self._done: deque[PendingAppend] = deque()
        self._thread: threading.Thread | None = None
        self._running = False  # the thread exists and will still take entries off the queue
        self._stopped = False
        self._failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The loop's context (structlog's bound broker_id): the completions the thread schedules
        # run in it, not in the thread's own, so their events (log_dir.failed) carry broker_id.
        self._context: contextvars.Context | None = None
        self._scheduled = False  # a completion pass is already scheduled on the loop

    @property
    def accepting(self) -> bool:
        """A submission now would be written (not refused by a stop or an earlier failure)."""
        return not self._stopped and self._failed is None

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def submit(self, entry: PendingAppend) -> None:
        """Queue `entry`'s write. Never raises: a refused entry completes failed, in order."""
        entry.writer = self
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._context = contextvars.copy_context()
        with self._cond:
            refusal: OSError | None = None
            if self._stopped:
                refusal = WriterStopped(self.directory)
            elif self._failed is not None:
                refusal = Unwritten(self._failed)
            if refusal is not None and not self._running:
                # Nothing is queued ahead of it: it fails now (never a thread started for it).
                entry.error, entry.state = refusal, FAILED
                self._done.append(entry)
                self._schedule()
                return
            if refusal is not None:
                entry.error = refusal  # failed by the thread in its turn, not written
            self._queue.append(entry)
            if self._thread is None:
                self._running = True
                self._thread = threading.Thread(target=self._run, name=f"log-writer-{self.broker_id}",
                                                daemon=True)
                try:
                    self._thread.start()
                except BaseException as e:  # no thread (RuntimeError: can't start new thread)
                    # Nobody will take the queue: the writer fails, and what is queued fails now,
                    # in order, so settles and close() do not wait for a thread that never ran.
                    log.exception("log_writer.start_failed", broker_id=self.broker_id, log_dir=self.directory)
                    self._thread, self._running, self._failed = None, False, e
                    for queued in self._queue:
                        queued.error = queued.error or OSError(errno.EIO, f"log writer not started: {e!r}")
                        queued.state = FAILED
                    self._done.extend(self._queue)
                    self._queue.clear()
                    self._cond.notify_all()
                    self._schedule()
            else:
                self._cond.notify()

    def _schedule(self) -> None:
        """Called holding _cond: one completion pass on the loop for what is done now."""
        if self._scheduled or self._loop is None:
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self.complete, context=self._context)
        except RuntimeError:  # the loop is closed: nobody is left to answer
            self._scheduled = False

    # ---- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        group: list[PendingAppend] = []  # taken off the queue, not yet handed back
        tails: list[PendingAppend] = []  # the last entry of each run written, for its page-cache round
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._stopped:
                        self._cond.wait()
                    if not self._queue:  # stopped and drained
                        self._running = False
                        return
                    group = list(self._queue)
                    self._queue.clear()
                    failed = self._failed
                i, n = 0, len(group)
                while i < n:
                    entry = group[i]
                    if entry.error is not None:  # refused at submission
                        i += 1
                        continue
                    if failed is not None:
                        entry.error = Unwritten(failed)
                        i += 1
                        continue
                    # A run of entries to one file goes in one writev: one GIL hand-back per run,
                    # not per entry (a busy loop gives the GIL back only every switch interval).
                    fd = entry.file.fd
                    j = i + 1
                    while j < n and j - i < _IOV_MAX and group[j].error is None and group[j].file.fd == fd:
                        j += 1
                    failed = self._write(group[i:j])
                    if failed is not None:
                        with self._cond:
                            self._failed = failed
                    else:
                        tails.append(group[j - 1])
                    i = j
                with self._cond:
                    for entry in group:
                        entry.state = FAILED if entry.error is not None else WRITTEN
                    self._done.extend(group)
                    self._cond.notify_all()
                    self._schedule()
                self._follow_caches(tails)
                tails = []
                # Hold nothing while waiting for the next entries: the last entry would keep its
                # request frame and its segment's descriptor (a deleted segment's too) alive.
                group = []
                del entry
        except BaseException as e:  # a bug: fail what is left, loudly, and take no more entries
            log.exception("log_writer.thread_failed", broker_id=self.broker_id, log_dir=self.directory)
            with self._cond:
                if self._failed is None:
                    self._failed = e
                self._running = False
                left = group + list(self._queue)
                self._queue.clear()
                for entry in left:
                    if entry.state == QUEUED:
                        # Written or not, it is not acknowledged; one that was attempted fails its
                        # log (its bytes may be in the file), the others only go unanswered-as-written.
                        entry.error = entry.error or OSError(errno.EIO, f"log writer failed: {e!r}")
                        entry.state = FAILED
                        self._done.append(entry)
                self._cond.notify_all()
                self._schedule()

    def _follow_caches(self, tails: list[PendingAppend]) -> None:
        """Each written file's page-cache round (broker.log.page_cache): here, off the loop, and
        after the group was handed back, so no acknowledgement waits for its system calls."""
        for last in tails:
            window = last.log.page_cache_window
            if window >= 0:
                last.segment.follow_cache(last.file.fd, last.position + last.size, window, self.broker_id)

    def _write(self, run: list[PendingAppend]) -> OSError | None:
        """A run of entries to one file appended (O_APPEND: at the end, which is each one's
        position); on an error the file is cut back to the position of the entry it met, the
        entries after it in the run are left unwritten, and the error is returned."""
        for entry in run:
            entry.attempted = True
        fd = run[0].file.fd
        views = [memoryview(entry.data) for entry in run]
        at, into = 0, 0  # the first entry not wholly written, and how much of it is
        try:
            while at < len(views):
                written = os.writev(fd, [views[at][into:], *views[at + 1:]] if into else views[at:])
                while written:
                    rest = len(views[at]) - into
                    if written >= rest:
                        written -= rest
                        at, into = at + 1, 0
                    else:
                        into += written
                        written = 0
        except OSError as e:
            failing = run[at]
            named = OSError(e.errno, e.strerror, str(failing.segment.log_path))
            try:
                os.ftruncate(fd, failing.position)
            except OSError as cut:
                from broker.log.segment import RollbackFailed
                named = RollbackFailed(named, cut)
            failing.error = named
            for later in run[at + 1:]:
                later.attempted = False
                later.error = Unwritten(named)
            return named
        return None

    # ---- the loop side ---------------------------------------------------------------

    def complete(self) -> None:
        """On the loop: every finished entry handed to its log and its callback, in queue order."""
        with self._cond:
            self._scheduled = False
        done = self._done
        appends = written = unwritten = size = 0
        while done:
            entry = done.popleft()
            appends += 1
            try:
                try:
                    entry.log.append_done(entry)
                except Exception as e:
                    # The log did not take it as written: its callback must not answer it as
                    # written (it answers a storage error and takes the directory offline).
                    log.exception("log_writer.completion_failed", broker_id=self.broker_id, log_dir=self.directory)
                    entry.state = FAILED
                    entry.error = OSError(errno.EIO, f"append completion failed: {e!r}")
                if entry.state == WRITTEN:
                    written += 1
                    size += entry.size
                elif not entry.attempted:
                    unwritten += 1
                callback = entry.callback
                if callback is not None:
                    try:
                        callback(entry)
                    except Exception:  # the callback answers its produce in any case (see submit_append)
                        log.exception("log_writer.callback_failed", broker_id=self.broker_id, log_dir=self.directory)
            finally:
                for waiter in entry.waiters or ():  # settles always released
                    if not waiter.done():
                        waiter.set_result(None)
        if appends:
            # Debug level (a no-op call otherwise): which appends took the thread's path, and how
            # many of a failed directory's queue were never attempted.
            log.debug("log_writer.completed", broker_id=self.broker_id, log_dir=self.directory, appends=appends,
                      written=written, bytes=size, unwritten=unwritten)

    def wait(self, entry: PendingAppend) -> None:
        """Block (the loop, briefly) until the thread has finished `entry`, then complete what is done."""
        with self._cond:
            while entry.state == QUEUED:
                if not self._running and entry in self._queue:  # cannot happen: nobody would take it
                    raise RuntimeError("log writer is not running")
                self._cond.wait()
        self.complete()

    async def close(self) -> None:
        """Stop: what is queued is written and completed; later submissions are refused; the
        thread is never started again."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join)
        self.complete()
