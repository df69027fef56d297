"""`leader-epoch-checkpoint`: a partition's leader epochs on disk, and the log they describe.

The file is Kafka's (LeaderEpochCheckpointFile over CheckpointFile): a version line `0`, a
count line, then one `epoch start_offset` line per entry. It is written whole on every change,
to `leader-epoch-checkpoint.tmp`, fsynced, renamed over the file and the directory fsynced, so
a crash leaves either the old or the new file.

`LeaderEpochFile` is what the replica manager holds per partition: the pure cache
(leader_epoch_cache.py) plus that file. On open it reads the file and drops entries the log no
longer holds (a crash after the checkpoint but before the append, or recovery cutting a torn
tail). A missing file, or one that does not parse, is rebuilt from the log's own batches (each
RecordBatch v2 carries its partitionLeaderEpoch) and written at once, so the scan runs once.
Departure from Kafka: Kafka fails the log directory on a malformed checkpoint; the epochs are
in the log, so this rebuilds them instead and logs a warning. Every OSError is raised as
KafkaStorageError: the replica manager takes the directory offline, as for the log itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import structlog

from broker.log.errors import KafkaStorageError
from broker.log.leader_epoch_cache import EpochEntry, LeaderEpochCache
from broker.log.log import Log
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


def write_atomically(path: Path, text: str) -> None:
    """temp file, fsync, rename, fsync the directory: the file is the old one or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
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


class LeaderEpochFile:
    """A partition's epoch cache kept in `<partition dir>/leader-epoch-checkpoint`; see the module docstring."""

    def __init__(self, directory: Path, cache: LeaderEpochCache) -> None:
        self.path = directory / FILENAME
        self.cache = cache

    @classmethod
    def open(cls, plog: Log) -> LeaderEpochFile:
        path = plog.directory / FILENAME
        try:
            try:
                entries: list[EpochEntry] | None = parse(path.read_text())
            except FileNotFoundError:
                entries = None
            except (CorruptCheckpoint, UnicodeDecodeError) as e:
                log.warning("leader_epochs.corrupt_checkpoint", path=str(path), error=str(e))
                entries = None
            rebuilt = entries is None
            if entries is None:
                entries = [EpochEntry(e, s) for e, s in scan_log(plog)]
            cache = LeaderEpochCache(entries)
            changed = cache.truncate_from_end(plog.log_end_offset)
            changed = cache.truncate_from_start(plog.log_start_offset) or changed
            epochs = cls(plog.directory, cache)
            if rebuilt or changed:
                epochs.flush()
                if rebuilt:
                    log.info("leader_epochs.rebuilt", path=str(path), entries=len(cache))
        except OSError as e:
            raise KafkaStorageError(plog.directory, "leader epochs", e) from e
        return epochs

    def flush(self) -> None:
        try:
            write_atomically(self.path, render(self.cache.entries))
        except OSError as e:
            raise KafkaStorageError(self.path.parent, "leader epoch checkpoint", e) from e

    # Each change is written at once, as Kafka's cache does; they are rare (leader changes).

    def assign(self, epoch: int, start_offset: int) -> None:
        if self.cache.assign(epoch, start_offset):
            self.flush()

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
