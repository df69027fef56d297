"""Cleaning one log: the I/O that broker.log.cleaner.rules and .batches decide (Kafka's Cleaner.clean).

On the broker's event loop, in bounded steps: segments are read a chunk at a time (at most
`CHUNK` bytes, one pread), each chunk's batches are mapped or filtered, and between chunks the
task awaits the throttle, so appends, fetches and replication go on while it runs. Only
inactive segments are read, and a segment's bytes below its size never change, so the reads need
no lock; a segment that is closed (its log deleted or truncated away) ends the pass, checked
before each read. The swap itself (`Log.replace_segments`) is one synchronous call, which checks
that the segments are still the log's, unchanged.

1. The offset map over the dirty range [first dirty, first uncleanable), segment by segment,
   until it is full (Kafka's buildOffsetMap); the map's end is the pass's end offset.
2. The segments below the end offset, in groups of at most segment.bytes (groupSegmentsBySize),
   each rewritten into `<base>.log.cleaned` with its offset and time index built on the way,
   fsynced, given the group's last modified time (Kafka keeps it: the delete horizon and time
   retention read it), then swapped in. The replaced segments' fds stay open for
   file.delete.delay.ms (the caller's `retire`), so fetches holding slices of them still read.

`MINIBROKER_TEST_CLEANER_KILL_AT` (tests only) kills the process with SIGKILL at a named point:
`cleaning` (a `.cleaned` log holding a first source segment's records), `cleaned` (written, not yet swapped), `swapped`
(the `.swap` files in place), `replacing` (the old files renamed to `.deleted`, the `.swap`
files not yet renamed).
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
from collections.abc import AsyncIterator, Callable, Container
from dataclasses import dataclass, field
from typing import Protocol

from broker.log.cleaner.batches import OffsetMap, filter_batch, map_batch
from broker.log.cleaner.rules import (
    Cleanable,
    CompactionConfig,
    SegmentStat,
    delete_horizon_ms,
    group_by_size,
    retain_deletes,
)
from broker.log.log import Log
from broker.log.segment import HEADER, Segment
from broker.log.time_index import TimeIndex, TimestampTracker
from protocol.records.records import time_head

KILL_AT_ENV = "MINIBROKER_TEST_CLEANER_KILL_AT"
KILL_POINTS = ("cleaning", "cleaned", "swapped", "replacing")
# The most one step reads (or writes) between two awaits: about 4 ms of parsing (1.4-1.6 us per
# record of ~27 bytes measured for the map and the filter), so produce latency barely moves.
CHUNK = 64 * 1024
_INDEX_POINT = struct.Struct(">II")


class Throttle(Protocol):
    async def take(self, nbytes: int) -> None: ...

    def chunk(self) -> int: ...


@dataclass
class CleanerStats:
    """One pass's figures (Kafka's CleanerStats, the parts that are logged)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    groups: int = 0
    end_offset: int = -1
    on_read: Callable[[int], None] = field(default=lambda n: None, repr=False)
    on_written: Callable[[int], None] = field(default=lambda n: None, repr=False)

    def read(self, n: int) -> None:
        self.bytes_read += n
        self.on_read(n)

    def written(self, n: int) -> None:
        self.bytes_written += n
        self.on_written(n)


class CleaningAborted(Exception):
    """The log changed under the pass (a segment closed, truncated or deleted): try again later."""


def kill_point(name: str) -> None:
    """Tests' fault injection: SIGKILL this process at `name` when the environment asks for it."""
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def segment_stats(log: Log) -> list[SegmentStat]:
    out = []
    for seg in log.segments:
        out.append(SegmentStat(seg.base_offset, seg.size, seg.largest_timestamp, _first_batch_timestamp(seg),
                               seg.last_modified_ms))
    return out


def _first_batch_timestamp(seg: Segment) -> int:
    if seg.size < HEADER.size or seg.fd < 0:
        return -1
    head = os.pread(seg.fd, 64, 0)
    if len(head) < HEADER.size + 5:
        return -1
    return time_head(head + bytes(64), 0)[1]


async def _entries(seg: Segment, start: int, limit: int, throttle: Throttle,
                   stats: CleanerStats) -> AsyncIterator[memoryview]:
    """Each whole entry of `seg` from position `start` to `limit`, read CHUNK-wise, throttled."""
    pos = start
    while pos + HEADER.size <= limit:
        if seg.fd < 0:
            raise CleaningAborted(f"segment {seg.base_offset} was closed")
        want = min(max(throttle.chunk(), HEADER.size), limit - pos)
        buf = os.pread(seg.fd, want, pos)
        if len(buf) < HEADER.size:
            raise CleaningAborted(f"segment {seg.base_offset} shrank")
        _, size = HEADER.unpack_from(buf, 0)
        if HEADER.size + size > len(buf):  # one entry larger than a chunk: read it whole
            if pos + HEADER.size + size > limit:
                raise CleaningAborted(f"entry at {pos} of segment {seg.base_offset} overruns it")
            buf = os.pread(seg.fd, HEADER.size + size, pos)
            if len(buf) < HEADER.size + size:
                raise CleaningAborted(f"segment {seg.base_offset} shrank")
        view = memoryview(buf)
        rel = 0
        while rel + HEADER.size <= len(buf):
            _, size = HEADER.unpack_from(buf, rel)
            end = rel + HEADER.size + size
            if size <= 0 or end > len(buf):
                break
            yield view[rel:end]
            rel = end
        # What was read counts, the cut-off tail that the next step reads again included: the
        # bound is on I/O, as the syscalls see it.
        stats.read(len(buf))
        pos += rel
        await throttle.take(len(buf))


class _CleanedWriter:
    """Writes one cleaned segment's three `.cleaned` files, building the indexes as recovery does."""

    def __init__(self, log: Log, base: int) -> None:
        self.log = log
        self.base = base
        self.interval = log.index_interval_bytes
        self.paths = {kind: log.cleaned_path(base, kind) for kind in ("log", "index", "timeindex")}
        self.fd = os.open(self.paths["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.pending = bytearray()
        self.position = 0
        self.since = 0
        self.next_key = base
        self.points = bytearray()
        self.time_index = TimeIndex(base)
        self.tracker = TimestampTracker()

    def append(self, entry: bytes | memoryview) -> None:
        _, ts, ts_offset, _ = time_head(entry, 0)
        self.tracker.observe(ts, ts_offset)
        if self.since > self.interval:
            self.points += _INDEX_POINT.pack(self.next_key - self.base, self.position)
            self.time_index.maybe_append(self.tracker.max_timestamp, self.tracker.offset_of_max)
            self.since = 0
        n = len(entry)
        self.pending += entry
        self.since += n
        self.position += n
        self.next_key = time_head(entry, 0)[2] + 1

    def drain(self) -> int:
        n = len(self.pending)
        if n:
            _write_all(self.fd, self.pending)
            self.pending.clear()
        return n

    async def finish(self, last_modified_ns: int) -> None:
        """Write the indexes and make all three files durable. The fsyncs run in a thread: the
        files are the cleaner's own until the swap, and an fsync may take long enough to stall
        every produce and fetch if it ran on the event loop."""
        self.drain()
        self.time_index.maybe_append(self.tracker.max_timestamp, self.tracker.offset_of_max)
        indexes = (("index", bytes(self.points)), ("timeindex", self.time_index.to_bytes()))
        # The thread owns the fd from here: a cancelled pass (discard) must not close it under it.
        log_fd, self.fd = self.fd, -1
        await asyncio.to_thread(self._write_and_sync, log_fd, indexes, last_modified_ns)

    def _write_and_sync(self, log_fd: int, indexes: tuple[tuple[str, bytes], ...], last_modified_ns: int) -> None:
        try:
            os.fsync(log_fd)
        finally:
            os.close(log_fd)
        for kind, data in indexes:
            fd = os.open(self.paths[kind], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        os.utime(self.paths["log"], ns=(last_modified_ns, last_modified_ns))

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for path in self.paths.values():
            path.unlink(missing_ok=True)


async def clean_log(log: Log, cleanable: Cleanable, config: CompactionConfig, offset_map: OffsetMap,
                    producer_last_offsets: Container[tuple[int, int]], throttle: Throttle, stats: CleanerStats,
                    retire: Callable[[list[Segment]], None]) -> int:
    """One cleaning pass over `log` (see the module docstring); returns the offset up to which the
    log is now clean (the next pass's first dirty offset). Raises CleaningAborted when the log
    changed under it, KafkaStorageError when its files fail."""
    offset_map.clear()
    start, stop = cleanable.first_dirty, cleanable.first_uncleanable
    segments = log.segments
    # 1. The offset map over the dirty segments.
    full = False
    mapped: list[tuple[Segment, int]] = []
    for i, seg in enumerate(segments[:-1]):
        next_base = segments[i + 1].base_offset
        if seg.base_offset >= stop or next_base <= start:
            continue
        mapped.append((seg, seg.size))
        pos = seg.lookup(start)[1] if seg.base_offset <= start else 0
        async for entry in _entries(seg, pos, seg.size, throttle, stats):
            if not map_batch(offset_map, entry, start):
                full = True
                break
        if full:
            break
        offset_map.update_latest(next_base - 1)
    end_offset = offset_map.latest_offset + 1
    stats.end_offset = end_offset
    if end_offset <= start:
        return start
    # 2. Rewrite and swap in each group below the end offset.
    stat = [SegmentStat(s.base_offset, s.size, -1, -1, s.last_modified_ms) for s in segments]
    horizon = delete_horizon_ms(stat, start, config.delete_retention_ms)
    for group in group_by_size(stat, config.segment_bytes, end_offset):
        old = [segments[i] for i in group]
        sizes = [s.size for s in old]
        writer = _CleanedWriter(log, old[0].base_offset)
        try:
            for i in group:
                seg = segments[i]
                keep_deletes = retain_deletes(stat[i], horizon)
                async for entry in _entries(seg, 0, sizes[group.index(i)], throttle, stats):
                    out = filter_batch(entry, offset_map, keep_deletes, producer_last_offsets)
                    if out is not None:
                        stats.records_kept += out[1]
                        stats.records_read += out[3]
                        writer.append(out[0])
                    else:
                        stats.records_read += _count_of(entry)
                    if len(writer.pending) >= CHUNK:
                        n = writer.drain()
                        stats.written(n)
                        await throttle.take(n)
                n = writer.drain()
                stats.written(n)
                kill_point("cleaning")  # a source segment's records are in the .cleaned log, not all yet
                await throttle.take(n)
            n = writer.drain()
            stats.written(n)
            await throttle.take(n)
            mtime_ns = max(os.fstat(s.fd).st_mtime_ns for s in old if s.fd >= 0) if all(
                s.fd >= 0 for s in old) else None
            if mtime_ns is None:
                raise CleaningAborted("a segment was closed")
            await writer.finish(mtime_ns)
        except BaseException:
            writer.discard()
            raise
        kill_point("cleaned")
        # The map must still describe the log: a record it names as a key's latest that a
        # truncation removed meanwhile would make this group drop that key's older values.
        if not _still_there(log, mapped):
            writer.discard()
            raise CleaningAborted("segments read for the offset map changed")
        replaced = log.replace_segments(old, sizes, kill_point)
        if replaced is None:
            raise CleaningAborted(f"segments from {old[0].base_offset} changed while they were cleaned")
        stats.groups += 1
        retire(replaced)
    return end_offset


def _still_there(log: Log, mapped: list[tuple[Segment, int]]) -> bool:
    """Every segment the map was built from is still the log's, its size unchanged (the groups
    already swapped in replace some of them; their replacement is checked by identity of the rest)."""
    current = {id(seg): seg.size for seg in log.segments}
    return all(id(seg) not in current and seg.fd >= 0 or current.get(id(seg)) == size for seg, size in mapped)


def _count_of(entry: memoryview) -> int:
    if entry[16] == 2:
        return int.from_bytes(entry[57:61], "big", signed=True)
    return 1


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
