"""A partition's producer table kept in step with its log: rebuilt at open, snapshotted, truncated.

Kafka 2.8's Log.rebuildProducerState and its snapshot handling, for a log without transactions:

- at open, snapshots above the log end (left by a log cut back in recovery) are deleted; the
  latest remaining one is loaded (a corrupt one is deleted and the next tried) and only the log
  after it is read, batch header by batch header. With no snapshot, a log that was shut down
  cleanly is not read at all (the upgrade case: the release before this one wrote no producer
  state, and Kafka skips the scan the same way); otherwise the whole log is read;
- a snapshot `<offset>.snapshot` (offset: the log end it reflects, 20 digits as segment names)
  is written when the log rolls a segment and at a clean close (not for an empty table of a log
  with no snapshot: the clean open reads the same without it), written to a temporary file,
  fsynced and renamed, so a crash leaves the old one or the new one, never half of one;
- truncation (a follower cutting its log) deletes the snapshots above the new end and, when the
  table reflected more than the log now holds, reloads it from the latest snapshot below and
  the log after that.

Storage errors are the log's: an OSError here is raised as KafkaStorageError.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import structlog

from broker.log.errors import KafkaStorageError
from broker.log.log import Log
from broker.log.producer_state import (
    CorruptSnapshot,
    ProducerStates,
    producer_batches,
)
from broker.log.small_files import read_small
from protocol.layouts import LOG_OVERHEAD, MAGIC_OFFSET, LogEntryHead, RecordBatchHeader, fixed, offset_of

log = structlog.get_logger()
_ENTRY_HEAD = fixed(LogEntryHead)
_LAST_DELTA = fixed(RecordBatchHeader, "last_offset_delta", "last_offset_delta")
_LAST_DELTA_AT = offset_of(RecordBatchHeader, "last_offset_delta")
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_TMP = f"{SNAPSHOT_SUFFIX}.tmp"  # a snapshot a crash interrupted
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_SCAN_CHUNK = 1 << 20


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in `directory`, ascending."""
    return _snapshot_offsets(os.listdir(directory))


def _snapshot_offsets(names: list[str]) -> list[int]:
    out = []
    for name in names:
        m = _SNAPSHOT_FILE.match(name)
        if m is not None:
            out.append(int(m.group(1)))
    return sorted(out)


class PartitionProducers:
    """The producer table of one partition's log, and its snapshot files beside the segments."""

    def __init__(self, log_: Log, expiration_ms: int) -> None:
        self.log = log_
        self.directory = log_.directory
        self.states = ProducerStates(expiration_ms, log_.log_start_offset)
        self._snap_offset = -1
        self._active_base = log_.segments[-1].base_offset if log_.segments else 0

    # ---- opening ---------------------------------------------------------------------------

    def load(self, now_ms: int, clean_shutdown: bool) -> None:
        """Rebuild the table for the log as opened (see the module docstring)."""
        try:
            end = self.log.log_end_offset
            # One listing for the whole load (a restart does this for every partition): the log's,
            # when it was just opened (it changes no snapshot file).
            names = self.log.names_at_open
            if names is None:
                names = os.listdir(self.directory)
            for name in names:
                if name.endswith(_SNAPSHOT_TMP):  # a crash while writing one
                    (self.directory / name).unlink(missing_ok=True)
            snapshots = _snapshot_offsets(names)
            for off in snapshots:
                if off > end:
                    snapshot_path(self.directory, off).unlink(missing_ok=True)
            snapshots = [off for off in snapshots if off <= end]
            if not snapshots and clean_shutdown:
                # Empty (the upgrade case, or a close that had no producer to snapshot): nothing is
                # written for it either; a crash later reads the log, as with no snapshot in Kafka.
                self.states.clear(end)
                return
            self._reload(now_ms, snapshots)
        except OSError as e:
            raise KafkaStorageError(self.directory, "load producer state", e) from e

    def _reload(self, now_ms: int, snapshots: list[int] | None = None) -> None:
        """From the latest snapshot (of `snapshots`, else those in the directory) and the log after it."""
        start, end = self.log.log_start_offset, self.log.log_end_offset
        self.states.clear(start)
        self._snap_offset = -1
        for off in reversed(list_snapshots(self.directory) if snapshots is None else snapshots):
            if off < start:
                break
            path = snapshot_path(self.directory, off)
            try:
                raw = read_small(path)
                if raw is None:
                    raise CorruptSnapshot("shrank while read")
                self.states.load_snapshot(raw, off, now_ms)
                self._snap_offset = off
                break
            except CorruptSnapshot as e:
                log.warning("producer_state.corrupt_snapshot", path=str(path), error=str(e))
                path.unlink(missing_ok=True)
        if self.states.map_end_offset < end:
            self._scan(self.states.map_end_offset, end)
        self.states.map_end_offset = end

    def _scan(self, offset: int, end: int) -> None:
        """Replay the batches in [offset, end) into the table, reading headers chunk by chunk."""
        while offset < end:
            piece = self.log.read(offset, _SCAN_CHUNK, max_offset=end, min_one_message=True)
            data = piece.read_bytes()
            if not data:
                return
            nxt = _next_offset(data)
            if nxt is None or nxt <= offset:
                return
            self.states.replicate((b for b in producer_batches(data) if b.last_offset >= offset), nxt)
            offset = nxt

    # ---- appends ---------------------------------------------------------------------------

    def after_append(self) -> None:
        """A roll since the last append: snapshot, so a restart reads only the log after it."""
        active = self.log.active_segment  # the last segment, without `segments`' copy of the list
        base = active.base_offset if active is not None else self._active_base
        if base != self._active_base:
            self._active_base = base
            self.take_snapshot()

    def replicated(self, data: bytes | memoryview) -> None:
        """A follower appended `data` (whole entries): update the table without checks."""
        self.states.replicate(producer_batches(data), self.log.log_end_offset)
        self.after_append()

    # ---- snapshots -------------------------------------------------------------------------

    def take_snapshot(self, sync: bool = True) -> None:
        """Write `<map end offset>.snapshot` unless it exists already (fsynced unless not `sync`:
        the broker's shutdown syncs the whole file system once instead).

        None for a log that holds no offset and has no snapshot: there is nothing it could spare a
        later load from reading. Kafka 2.8's takeSnapshot writes one only when the map end is past
        the last snapshot's offset, which starts at the log start; here that saves a new
        partition's first close (and its first clean open) a file creation."""
        off = self.states.map_end_offset
        if off == self._snap_offset:
            return
        if self._snap_offset < 0 and off <= self.log.log_start_offset:
            return
        path = snapshot_path(self.directory, off)
        tmp = path.with_suffix(".snapshot.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, self.states.snapshot())
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            raise KafkaStorageError(self.directory, "producer snapshot", e) from e
        self._snap_offset = off

    def close(self, sync: bool = True) -> None:
        """The snapshot at the log end; none for an empty table when the log has no snapshot at all:
        a clean open without one reads an empty table (Kafka's upgrade case) without reading the
        log. 10,000 snapshot files created by a shutdown were ~60% of its time (py-spy), for
        partitions no idempotent producer ever wrote to."""
        self.states.map_end_offset = self.log.log_end_offset
        if self._snap_offset < 0 and not len(self.states):
            return
        self.take_snapshot(sync)

    # ---- truncation ------------------------------------------------------------------------

    def truncated(self, now_ms: int) -> None:
        """The log was cut back: drop snapshots above its end and reload if the table is ahead."""
        end = self.log.log_end_offset
        try:
            for off in list_snapshots(self.directory):
                if off > end:
                    snapshot_path(self.directory, off).unlink(missing_ok=True)
            self._active_base = self.log.segments[-1].base_offset
            if self.states.map_end_offset != end:
                self._reload(now_ms)
        except OSError as e:
            raise KafkaStorageError(self.directory, "truncate producer state", e) from e

    def restarted_at(self, offset: int) -> None:
        """The log was emptied to start at `offset`: forget every producer and snapshot."""
        try:
            for off in list_snapshots(self.directory):
                snapshot_path(self.directory, off).unlink(missing_ok=True)
        except OSError as e:
            raise KafkaStorageError(self.directory, "truncate producer state", e) from e
        self.states.clear(offset)
        self._snap_offset = -1
        self._active_base = offset

    def log_start_advanced(self, start: int) -> None:
        """Retention moved the log start: snapshots below it go with the segments (Kafka deletes the
        snapshot of each deleted segment), and the table's end is never below the start."""
        try:
            for off in list_snapshots(self.directory):
                if off < start:
                    snapshot_path(self.directory, off).unlink(missing_ok=True)
        except OSError as e:
            raise KafkaStorageError(self.directory, "delete producer snapshots", e) from e
        if self._snap_offset < start:
            self._snap_offset = -1
        if self.states.map_end_offset < start:
            self.states.map_end_offset = start

    def remove_expired(self, now_ms: int) -> int:
        return self.states.remove_expired(now_ms)


def _next_offset(data: bytes) -> int | None:
    """The offset after the last whole entry of a log slice (any magic), or None if it holds none."""
    pos, end, nxt = 0, len(data), None
    while pos + MAGIC_OFFSET < end:
        base, length = _ENTRY_HEAD.unpack_from(data, pos)
        if length < 0 or pos + LOG_OVERHEAD + length > end:
            break
        if data[pos + MAGIC_OFFSET] >= 2 and pos + _LAST_DELTA_AT + 4 <= end:
            nxt = base + _LAST_DELTA.unpack_from(data, pos + _LAST_DELTA_AT)[0] + 1
        else:
            nxt = base + 1  # magic 0/1: the entry's offset is its last (a wrapper's last inner) offset
        pos += LOG_OVERHEAD + length
    return nxt
