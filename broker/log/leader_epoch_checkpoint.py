"""`leader-epoch-checkpoint`: a partition's leader epochs on disk, and the log they describe.

The file is Kafka's (LeaderEpochCheckpointFile over CheckpointFile): a version line `0`, a
count line, then one `epoch start_offset` line per entry. It is written whole on every change,
to `leader-epoch-checkpoint.tmp`, fsynced, renamed over the file and the directory fsynced, so
a crash leaves either the old or the new file.

Syncs batched (issue 21): with a `DeferredSyncs`, a change is written and renamed into place at
once but its fsyncs (file, directory) wait in that set; the replica manager runs them together,
on worker threads, before it answers the LeaderAndIsr that made them, every checkpoint interval
and at shutdown. Four fsyncs per partition, one after another on the event loop, were two
thirds of the broker's time creating or restarting 1,000 partitions. A power loss before the
sync may leave the old file or an unparsable one: both are handled at open (the log is
scanned). An empty cache of an empty log is not written at open: no file reads the same. While
the file does not exist (a new partition), a change is not written on the event loop at all: the
worker threads write it whole at the next sync, without fsync: a crash before then, or a power
loss before the file is on disk, finds no file, and the open rebuilds the cache from the log, which
holds every epoch appended meanwhile (the 20,000 fsyncs of 10,000 new partitions' files took
2-18 s of a create's round here, though creating the files costs as much on a busy machine; a
clean shutdown's syncfs makes them durable).

A new leader's epoch (become_leader, `later`), and what an open changed, are not written on the
event loop at all (10,000 temp files written and renamed there were 7-13% of a 10,000-partition
restart): the worker threads write them whole, and fsync them, in the round that runs before the
LeaderAndIsr is answered. Why a crash meanwhile loses no entry (the rule: a new epoch's entry must
be in the checkpoint before a crash could leave batches of that epoch in the log without it, or
the open after the crash must find it again):
- the open after a crash (no clean-shutdown marker) recovers the log's last segment, and the epochs
  of the recovered batches newer than the checkpoint's latest are assigned (Kafka's
  LogSegment.recover), at the offset of their first batch: for a leader's epoch that is the log end
  at become_leader, its own entry, since every batch it appends carries it;
- a roll first writes the entries still due (`Log.before_roll` -> `write_pending`: renamed into
  place on the loop, taking back a job no thread started, or stopping the one a thread runs before
  its rename, so that its older text cannot land over them; the loop never waits out a thread's
  fsync), so batches of an epoch whose entry is not on disk are always in the last segment;
- a clean shutdown runs the round before the logs close and the marker is written (ReplicaManager.stop),
  after any round a cancelled LeaderAndIsr left running (ReplicaManager.sync_epochs shields it);
- every other change (a truncation, an appended batch's epoch, a clear) is written at once, even
  while a round's job holds the file (`flush` takes the job back or stops it before its rename, as
  a roll does): recovery only adds missing newer epochs, so a stale entry left on disk would
  survive a crash.
An epoch with no batch yet whose entry a crash lost reads the same as one never assigned: the
restarted broker gets a newer epoch from the controller anyway. (A power loss is a different
matter, here as before: the log's own tail is not fsynced either, see the syncs above.)

`LeaderEpochFile` is what the replica manager holds per partition: the pure cache
(leader_epoch_cache.py) plus that file. On open it reads the file, drops entries the log no
longer holds (a crash after the checkpoint but before the append, or recovery cutting a torn
tail) and takes the newer epochs of the batches recovery read (above). A missing file, or one that does not parse, is rebuilt from the log's own batches (each
RecordBatch v2 carries its partitionLeaderEpoch) and written at once, so the scan runs once.
Departure from Kafka: Kafka fails the log directory on a malformed checkpoint; the epochs are
in the log, so this rebuilds them instead and logs a warning. Every OSError is raised as
KafkaStorageError: the replica manager takes the directory offline, as for the log itself.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from broker.log.errors import KafkaStorageError
from broker.log.leader_epoch_cache import EpochEntry, LeaderEpochCache
from broker.log.log import Log
from broker.log.small_files import read_small
from protocol.records.epochs import epoch_runs

log = structlog.get_logger()

FILENAME = "leader-epoch-checkpoint"
VERSION = 0
_SCAN_CHUNK = 1 << 20


class CorruptCheckpoint(ValueError):
    """The file's text is not Kafka's checkpoint format (version 0)."""


def parse(text: str) -> list[EpochEntry]:
    lines = text.splitlines()
    if not lines:
        return []  # Kafka reads an empty file (the one CheckpointFile creates) as no entries
    try:
        version = int(lines[0])
        if version != VERSION:
            raise CorruptCheckpoint(f"unrecognised checkpoint version {version}")
        if len(lines) == 1:
            return []
        expected = int(lines[1])
        entries = []
        for line in lines[2:]:
            parts = line.split()
            if len(parts) != 2:
                raise CorruptCheckpoint(f"malformed line {line!r}")
            entries.append(EpochEntry(int(parts[0]), int(parts[1])))
    except ValueError as e:
        raise e if isinstance(e, CorruptCheckpoint) else CorruptCheckpoint(str(e)) from e
    if len(entries) != expected:
        raise CorruptCheckpoint(f"expected {expected} entries, found {len(entries)}")
    return entries


def render(entries: Iterable[tuple[int, int]]) -> str:
    rows = [f"{epoch} {start}\n" for epoch, start in entries]
    return f"{VERSION}\n{len(rows)}\n" + "".join(rows)


def write_atomically(path: Path, text: str, sync: bool = True) -> None:
    """temp file, fsync, rename, fsync the directory: the file is the old one or the new one.
    Without `sync` the fsyncs are the caller's (DeferredSyncs)."""
    tmp = write_temp(path, ".tmp", text, sync)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def write_temp(path: Path, suffix: str, text: str, sync: bool) -> Path:
    """`text` in the temp file `path` + `suffix` (fsynced with `sync`), ready to be renamed over `path`."""
    tmp = path.with_name(path.name + suffix)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def scan_log(plog: Log) -> Iterator[tuple[int, int]]:
    """(epoch, base offset) where runs of magic-2 batches of one epoch start, over the whole log.

    Reads the segment files in chunks and looks only at each entry's head, so a log of magic-1
    messages (which carry no epoch) costs one read of its files.
    """
    for seg in plog.segments:
        pos, size = 0, seg.size
        while pos < size:
            chunk = os.pread(seg.fd, min(_SCAN_CHUNK, size - pos), pos)
            runs, stop = epoch_runs(chunk)
            yield from runs  # a run split by the chunk's edge is repeated: assign ignores it
            if stop <= 0:
                break  # a torn head at the segment's end, or an impossible size: recovery's business
            pos += stop


def take_recovered_epochs(cache: LeaderEpochCache, runs: Iterable[tuple[int, int]]) -> bool:
    """Kafka's LogSegment.recover: each run of the recovered batches whose epoch is newer than the
    cache's latest is assigned (an entry the checkpoint lacks because a crash came before it was
    written). Older epochs are left alone: the checkpoint, written before them, knows them better
    (a run of a compacted or truncated log may start later than its epoch did). True if changed."""
    changed = False
    for epoch, base in runs:
        latest = cache.latest_epoch
        if latest is None or epoch > latest:
            changed = cache.assign(epoch, base) or changed
    return changed


# A written job's state (Job.state), changed under _JOBS: the loop may take a job not yet started
# back (CLAIMED), or stop one a thread runs from renaming its text into place (SUPERSEDED), and
# write the file itself (`DeferredSyncs.write_now`). A thread writes its text to a temp file of
# its own (_JOB_TMP: the loop may write the file's `.tmp` meanwhile), fsyncs it, and renames it
# into place only if the loop has not superseded it (RENAMING, set under the lock): the loop
# never waits for a thread's fsync, at most for a rename under way.
QUEUED, RUNNING, DONE, CLAIMED, SUPERSEDED, RENAMING = range(6)
_JOBS = threading.Lock()
_JOB_TMP = ".job.tmp"


class Job:
    """One file's round of work: its text written whole (and fsynced), or (text None) its fsyncs."""

    __slots__ = ("path", "text", "sync", "state", "error")

    def __init__(self, path: Path, text: str | None, sync: bool = True) -> None:
        self.path = path
        self.text = text
        self.sync = sync  # fsync the file and its directory (a new file needs neither: module docstring)
        self.state = QUEUED
        self.error: OSError | None = None

    def supersede(self) -> bool:
        """On the loop, which writes the file itself next: True if this job will not rename its
        (older) text into place after that write (not started, or its thread stops before the
        rename); False if it did so already. Never waits for the thread's write or fsync: only
        for a rename under way (no fsync is in it; the directory's fsync follows the DONE)."""
        with _JOBS:
            if self.state == QUEUED:
                self.state = CLAIMED
            elif self.state == RUNNING:
                self.state = SUPERSEDED
            if self.state in (CLAIMED, SUPERSEDED):
                return True
        while self.state == RENAMING:
            time.sleep(0.0001)  # one rename under way (no fsync): the thread sets DONE right after it
        return False


class DeferredSyncs:
    """Checkpoint files whose writes (on worker threads) or fsyncs (the file, its directory) are still due."""

    def __init__(self) -> None:
        self._paths: set[Path] = set()
        self._unwritten: dict[Path, LeaderEpochFile] = {}
        self._in_flight: dict[Path, LeaderEpochFile] = {}
        self._lock = threading.Lock()

    def add(self, path: Path) -> None:
        with self._lock:
            self._paths.add(path)

    def add_unwritten(self, epochs: LeaderEpochFile) -> None:
        """A file whose current entries are not on disk yet: written whole (and fsynced) at the next sync."""
        self._unwritten[epochs.path] = epochs

    def __len__(self) -> int:
        return len(self._paths) + len(self._unwritten)

    def pending(self, epochs: LeaderEpochFile) -> bool:
        """Its entries wait for the next round's threads."""
        return epochs.path in self._unwritten

    def take(self) -> list[Job]:
        """On the event loop: the pending jobs, each a text to write or (text None) fsyncs only.
        A file being written by a job is written by jobs only (`in_flight`) until `done`, but for
        `write_now`."""
        unwritten, self._unwritten = self._unwritten, {}
        jobs: list[Job] = []
        for path, epochs in unwritten.items():
            job = Job(path, render(epochs.cache.entries), sync=epochs.written)
            epochs.in_flight = True
            epochs.job = job
            self._in_flight[path] = epochs
            jobs.append(job)
        with self._lock:
            paths, self._paths = self._paths, set()
        jobs += [Job(path, None) for path in paths if path not in unwritten]
        return jobs

    def done(self, failures: list[tuple[Path, OSError]]) -> list[tuple[Path, OSError]]:
        """On the event loop, after `run`: the files written exist from now on. A file given a new
        leader's epoch while its job was in flight (other changes are written at once, `flush`) is
        written here at once, renamed into place as any change of an existing file is (its fsyncs
        deferred), not left for the next round. The failures of those writes."""
        failed = {path for path, _ in failures}
        in_flight, self._in_flight = self._in_flight, {}
        errors: list[tuple[Path, OSError]] = []
        for path, epochs in in_flight.items():
            epochs.in_flight = False
            epochs.job = None
            if path in failed:
                continue
            epochs.written = True
            if self._unwritten.get(path) is epochs:
                del self._unwritten[path]
                if not path.parent.exists():
                    continue  # its partition was deleted meanwhile
                try:
                    write_atomically(path, render(epochs.cache.entries), sync=False)
                except OSError as e:
                    errors.append((path, e))
                    continue
                self.add(path)
        return errors

    def write_now(self, epochs: LeaderEpochFile) -> None:
        """On the loop, before the file's log rolls or for a change other than a new leader's
        epoch: the file's entries on disk now (renamed into place; the fsyncs stay deferred), if
        any are still due. A job not yet started is taken back, and one a thread runs is stopped
        before its rename (Job.supersede), and the current entries are written here: the loop
        does not wait out the thread's fsync. See the module docstring: a new epoch's batches
        must not leave the last segment before the checkpoint holds it."""
        job = epochs.job
        taken = job is not None and job.supersede()
        if job is not None and not taken and job.error is not None:
            raise KafkaStorageError(epochs.path.parent, "leader epoch checkpoint", job.error)
        if self._unwritten.pop(epochs.path, None) is None and not taken:
            return
        try:
            write_atomically(epochs.path, render(epochs.cache.entries), sync=False)
        except OSError as e:
            raise KafkaStorageError(epochs.path.parent, "leader epoch checkpoint", e) from e
        self.add(epochs.path)
        epochs.written = True

    @staticmethod
    def run(jobs: list[Job], threads: int = 16) -> list[tuple[Path, OSError]]:
        """On worker threads: every job, `threads` at a time; the failures."""
        if not jobs:
            return []
        with ThreadPoolExecutor(max_workers=min(threads, len(jobs)), thread_name_prefix="epoch-sync") as pool:
            for _ in pool.map(_run_job, jobs):
                pass
        return [(job.path, job.error) for job in jobs if job.error is not None]

    def sync(self, threads: int = 16) -> list[tuple[Path, OSError]]:
        """All three steps at once (no event loop: tests, tools)."""
        failures = self.run(self.take(), threads)
        return failures + self.done(failures)


def _run_job(job: Job) -> None:
    text = job.text
    if text is None:
        job.error = _sync_file_and_dir(job.path)
        return
    with _JOBS:
        if job.state == CLAIMED:
            return  # the loop wrote it (write_now)
        job.state = RUNNING
    tmp: Path | None = None
    try:
        if not job.path.parent.exists():  # a deleted partition's file is not made again
            return
        tmp = write_temp(job.path, _JOB_TMP, text, job.sync)
        with _JOBS:
            if job.state == SUPERSEDED:
                return  # the loop wrote newer entries meanwhile: this text must not replace them
            job.state = RENAMING
        os.replace(tmp, job.path)
        tmp = None
        job.state = DONE  # the loop may write the file again from here: the rename is behind it
        if job.sync:
            fsync_dir(job.path.parent)
    except OSError as e:
        job.error = e
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()  # not renamed: superseded, or failed
        with _JOBS:
            if job.state != SUPERSEDED:
                job.state = DONE


def _sync_file_and_dir(path: Path) -> OSError | None:
    try:
        for target, flags in ((path, os.O_RDONLY), (path.parent, os.O_RDONLY)):
            try:
                fd = os.open(target, flags)
            except FileNotFoundError:
                continue  # deleted meanwhile (a topic deletion): nothing to keep
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as e:
        return e
    return None


class LeaderEpochFile:
    """A partition's epoch cache kept in `<partition dir>/leader-epoch-checkpoint`; see the module docstring."""

    def __init__(self, directory: Path, cache: LeaderEpochCache, deferred: DeferredSyncs | None = None) -> None:
        self.path = directory / FILENAME
        self.cache = cache
        self.deferred = deferred
        self.written = True  # the file exists; else changes are written by DeferredSyncs' threads
        self.in_flight = False  # a DeferredSyncs job is writing it now
        self.job: Job | None = None  # that job
        self.dirty = False  # changed at open, not written yet (see open's `write`)

    @classmethod
    def open(cls, plog: Log, deferred: DeferredSyncs | None = None, write: bool = True) -> LeaderEpochFile:
        """Read (or rebuild) the cache. Without `write`, a change found at open is left for the
        caller's `flush_if_dirty` (a new leader's epoch rewrites the file anyway: one write, not two)."""
        path = plog.directory / FILENAME
        missing = False  # no file at all (not a corrupt one): no stat more to tell
        try:
            try:
                # The log's listing at open says whether the file is there: no failed open each.
                if plog.names_at_open is not None and FILENAME not in plog.names_at_open:
                    raise FileNotFoundError(path)
                raw = read_small(path)
                if raw is None:
                    raise CorruptCheckpoint("shrank while read")
                entries: list[EpochEntry] | None = parse(raw.decode())
            except FileNotFoundError:
                entries = None
                missing = True
            except (CorruptCheckpoint, UnicodeDecodeError) as e:
                log.warning("leader_epochs.corrupt_checkpoint", path=str(path), error=str(e))
                entries = None
            rebuilt = entries is None
            if entries is None:
                entries = [EpochEntry(e, s) for e, s in scan_log(plog)]
            cache = LeaderEpochCache(entries)
            changed = cache.truncate_from_end(plog.log_end_offset)
            if not rebuilt:
                changed = take_recovered_epochs(cache, plog.recovered_epochs or ()) or changed
            plog.recovered_epochs = None  # read once
            changed = cache.truncate_from_start(plog.log_start_offset) or changed
            epochs = cls(plog.directory, cache, deferred)
            if deferred is not None:
                plog.before_roll = epochs.write_pending
            if rebuilt and not len(cache) and missing and plog.log_end_offset == plog.log_start_offset:
                epochs.written = False
                return epochs  # a new, empty log: no file and an empty cache read the same
            if (rebuilt or changed) and not write:
                epochs.dirty = True
            elif rebuilt or changed:
                epochs.flush()
            if rebuilt:
                log.info("leader_epochs.rebuilt", path=str(path), entries=len(cache))
        except OSError as e:
            raise KafkaStorageError(plog.directory, "leader epochs", e) from e
        return epochs

    def flush_if_dirty(self, later: bool = False) -> None:
        if self.dirty:
            self.flush(later)

    def flush(self, later: bool = False) -> None:
        """Write the entries (see the module docstring); `later`: by the DeferredSyncs' threads."""
        self.dirty = False
        try:
            if self.deferred is None:
                write_atomically(self.path, render(self.cache.entries))
                self.written = True
            elif self.in_flight and not later:
                # A round's thread is writing (or about to write) this file with the older entries.
                # A change other than a new leader's epoch (a truncation, an appended batch's epoch,
                # a clear) goes to disk now, as Kafka writes it: the crash-safety argument above
                # covers an entry missing from the file, not a stale one. A truncated entry still on
                # disk when a crash comes would survive the open if the log grew past it meanwhile
                # with an older epoch's batches, which recovery does not assign.
                self.deferred.add_unwritten(self)
                self.deferred.write_now(self)
            elif later or not self.written or self.in_flight:
                self.deferred.add_unwritten(self)  # no file yet, or a thread writing it: see above
            else:
                write_atomically(self.path, render(self.cache.entries), sync=False)
                self.deferred.add(self.path)
        except OSError as e:
            raise KafkaStorageError(self.path.parent, "leader epoch checkpoint", e) from e

    # Each change is written at once, as Kafka's cache does; they are rare (leader changes).

    def assign(self, epoch: int, start_offset: int, later: bool = False) -> None:
        """`later`: written by the DeferredSyncs' threads (a new leader's epoch, see the module docstring)."""
        if self.cache.assign(epoch, start_offset):
            self.flush(later)

    def write_pending(self) -> None:
        """The log's `before_roll`: entries still due to a thread written now (DeferredSyncs.write_now)."""
        if self.deferred is not None and (self.in_flight or self.deferred.pending(self)):
            self.deferred.write_now(self)

    def assign_from(self, records: bytes | memoryview) -> None:
        """Take the epochs stamped in appended records (magic-2 batches; older entries have none)."""
        for epoch, base in epoch_runs(records)[0]:
            self.assign(epoch, base)

    def truncate_from_end(self, end_offset: int) -> None:
        if self.cache.truncate_from_end(end_offset):
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        if self.cache.truncate_from_start(start_offset):
            self.flush()

    def clear(self) -> None:
        if self.cache.clear():
            self.flush()

    @property
    def latest_epoch(self) -> int | None:
        return self.cache.latest_epoch

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        return self.cache.end_offset_for(requested_epoch, log_end_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        return self.cache.epoch_for_offset(offset)
