"""A partition's log: an ordered list of segments, with Kafka's read, roll and recovery rules.

Synchronous on purpose: the broker calls it from its event loop. Appends are one `os.write` into
the page cache (a killed process loses nothing that was written; `flush()` is what fsyncs), and
reads are an index bisect plus a pread of a few KiB of headers, so no call reads a whole file
except recovery at open.

Leader Produce appends are two-phase (broker.log.writer): `start_append` assigns the offsets
(`next_offset`) and the position on the loop, the log directory's writer thread makes the write,
and `append_done`, on the loop in start order, moves the log end offset, size and indexes. So
`log_end_offset` (what reads, followers, the high watermark and ListOffsets see) never counts
bytes not yet in the file, and `next_offset` runs ahead of it by the appends in flight. Every other
change (a synchronous append, a roll, truncation, retention, compaction's swap, flush, close,
delete) first settles the log (`settle_now`: waits for its writes in flight and completes them),
so none of them meets a write under way; `settle` is the awaitable form.

Storage errors (Kafka's Log.maybeHandleIOException): every OSError on the log's files is
raised as KafkaStorageError and marks the log failed, so that every later call raises it too
and nothing more is written to a log whose state on disk is uncertain; the replica manager then
takes the whole log directory offline. Running out of descriptors (EMFILE, ENFILE) is the
exception: it fails only that call, which left nothing half done (broker.log.open_files), and
the replica manager answers KAFKA_STORAGE_ERROR for that partition alone. An append that fails leaves no trace (segment.py cuts
both files back): after a restart recovery finds every entry written before it.

Each segment has a time index (broker.log.time_index) and `offset_for_timestamp` answers
ListOffsets by timestamp as Kafka's Log.fetchOffsetByTimestamp does; a time index that is missing
or corrupt has its segment recovered (rebuilt from the log) at open, except the last segment's
after a clean close that left both its index files out (broker.log.segment: rebuilt from the entry
heads, nothing validated).

Retention (broker.log.retention holds the rules): `delete_oldest_segments` removes whole
segments from the front as Kafka's asynchronous delete does: the files are renamed to
`<name>.deleted` at once and the log start offset moves to the next segment's base, but the fds
stay open, so a FileSlice already handed to a fetch stays readable, until `finish_delete` (the
broker calls it `file.delete.delay.ms` later) closes and unlinks them; an open removes any
`.deleted` file a crash left. The log start offset is a field of its own (Kafka's
logStartOffset): opened from the broker's `log-start-offset-checkpoint` value, never below the
first segment's base, and moved only by retention and by a follower restarting empty. A segment
also rolls on time (`segment_ms`, Kafka's LogSegment.shouldRoll rule, see retention.py).

Compaction (broker.log.cleaner) writes a cleaned copy of a run of segments as
`<base>.{log,index,timeindex}.cleaned` and swaps it in with `replace_segments` (Kafka's
Log.replaceSegments: `.cleaned` -> `.swap`, the old files -> `.deleted` as retention's delete
does, `.swap` -> the segment's name); `_complete_swaps` at open finishes or discards a swap a
crash interrupted. Offsets never change, so neither does the log start offset.

Departures from Kafka 0.10.1: the index key of an entry is the offset before it rather than its
first offset (see segment.py), which gives the same lookups without parsing compressed wrappers.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import shutil
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.log.errors import InvalidAppend, KafkaStorageError, OffsetOutOfRange
from broker.log.index_files import PendingIndexFiles
from broker.log.open_files import SEGMENT_FILES, OpenFile, OpenFiles, is_descriptor_exhaustion
from broker.log.page_cache import DISABLED as DISABLED_WINDOW
from broker.log.page_cache import TailCache
from broker.log.retention import SegmentStat, should_roll_on_time
from broker.log.segment import HEADER, U32_MAX, Segment, segment_name
from broker.log.time_index import legacy_offsets
from broker.log.writer import FAILED, PendingAppend, Unwritten, WriterStopped
from protocol.records.records import TIME_HEAD_SIZE, max_timestamp, time_head

CLEAN_SHUTDOWN = ".clean_shutdown"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
DELETED_SUFFIX = ".deleted"  # Kafka's Log.DeletedFileSuffix
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000  # Kafka's log.roll.hours=168
# A cleaned segment's files while it is written (`.cleaned`) and once whole (`.swap`); the
# segments it replaces go the way retention's do (`.deleted`, then unlinked).
CLEANED, SWAP = ".cleaned", ".swap"
_SWAP_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)\.swap$")
# The index files are renamed before the log file, so a `.log.swap` implies its indexes moved too.
_SWAP_ORDER = ("index", "timeindex", "log")
_SCAN_CHUNK = 1 << 20
_BATCH_MAGIC = 2
_LAST_DELTA_AT = 23
# Relative offsets are stored as u32 in the index; Kafka rolls at Int.MaxValue as well.
_MAX_RELATIVE_OFFSET = (1 << 31) - 1


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, to be pread or sendfile'd.

    It holds the segment's `OpenFile`, so its descriptor stays open while the slice lives, through
    a roll, an eviction (broker.log.open_files), a close or a deletion of the segment.
    """

    file: OpenFile
    position: int
    length: int

    @property
    def fd(self) -> int:
        return self.file.fd

    def read_bytes(self) -> bytes:
        if self.length <= 0:
            return b""
        return os.pread(self.fd, self.length, self.position)

    def __len__(self) -> int:
        return self.length


class Log:
    """Segments of one partition in `directory`; see the module docstring."""

    def __init__(self, directory: Path, segment_bytes: int, index_interval_bytes: int,
                 clock: Callable[[], int] = _wall_ms, open_files: OpenFiles | None = None,
                 index_files: PendingIndexFiles | None = None) -> None:
        if not 0 < segment_bytes <= U32_MAX:
            raise ValueError(f"segment_bytes must be in (0, {U32_MAX}], got {segment_bytes}")
        if index_interval_bytes <= 0:
            raise ValueError(f"index_interval_bytes must be positive, got {index_interval_bytes}")
        self.directory = directory
        self.open_files = open_files or SEGMENT_FILES
        self.index_files = index_files  # where its segments without index files register (the broker's pass)
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._log_end_offset = 0
        self._size = 0
        self._unflushed: set[Segment] = set()
        self._dir_dirty = False
        self._closed = False
        self._failed: KafkaStorageError | None = None
        # Retention and time rolls (see the module docstring).
        self.segment_ms = DEFAULT_SEGMENT_MS
        # Page cache kept behind the end of the segment being written (broker.log.page_cache;
        # the broker sets log.page.cache.window.bytes, a log made elsewhere leaves it to the kernel).
        self.page_cache_window = DISABLED_WINDOW
        self._clock = clock
        self._log_start_offset = 0
        self._active_created_ms = clock()
        self._active_first_timestamp: int | None = None  # None: not read yet (or the segment is empty)
        self._pending_deletes: list[list[Segment]] = []
        # Appends started (offsets and positions assigned) whose bytes the directory's writer
        # thread has not yet reported written, oldest first (`start_append`).
        self._in_flight: deque[PendingAppend] = deque()
        self._in_flight_bytes = 0
        # The directory's listing as `open` read it (its own files since changed, the others not):
        # what the partition's other files load from without listing it again.
        self.names_at_open: list[str] | None = None
        self.opened_clean = False  # `open` found it closed cleanly (its indexes trusted)
        # (epoch, base offset) of each run of one leader epoch's batches in the segments `open`
        # recovered, in order (None: it recovered none). The leader-epoch file takes the epochs
        # newer than its own from them (Kafka's LogSegment.recover; see leader_epoch_checkpoint).
        self.recovered_epochs: list[tuple[int, int]] | None = None
        # Called before a roll seals the active segment: the leader-epoch file writes entries still
        # due to its worker threads, as recovery re-reads only the last segment for them.
        self.before_roll: Callable[[], None] | None = None

    # ---- opening and recovery --------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, segment_bytes: int = 1 << 30, index_interval_bytes: int = 4096,
             log_start_offset: int = 0, clock: Callable[[], int] = _wall_ms,
             open_files: OpenFiles | None = None, clean_shutdown: bool = False,
             index_files: PendingIndexFiles | None = None) -> Log:
        """Open (creating if needed) and recover the log in `directory`.

        The log was closed cleanly if its directory holds the `.clean_shutdown` marker (consumed
        here) or the caller says so (`clean_shutdown`: the broker's one marker for its log dir).

        After a clean close the indexes are trusted and only the tail after the last index point
        is read; index files are read on first use (Kafka's LazyIndex, broker.log.segment), except
        the active segment's offset index, which gives the log end offset. Otherwise the last segment is fully validated (size, offset order, CRC) and cut
        at the first bad entry, and any other segment whose index is missing or inconsistent is
        rebuilt the same way; a bad entry there also drops every later segment, because the log
        must stay contiguous.

        After a clean close, a last segment with bytes and neither index file (its close left
        them out: Segment.write_indexes) has both rebuilt from its entry heads, as it was, without
        validating anything (`Segment.files_omitted`).

        A segment with no bytes and neither index file (a new segment closed before its files
        were made) is taken as it is, clean or not: empty indexes, nothing to recover; its files
        are made after its first append, like a new segment's (`index_files`,
        broker.log.index_files). Kafka 2.8 logs an error and recovers it (LogSegment.sanityCheck,
        then recoverSegment).

        `log_start_offset` is the checkpointed log start; the log starts at the larger of it and
        the first segment's base (and never above its end).
        """
        directory = Path(directory)
        log = cls(directory, segment_bytes, index_interval_bytes, clock, open_files, index_files)
        log.opened_clean = clean_shutdown
        try:
            try:
                names = os.listdir(directory)
            except FileNotFoundError:  # a new partition
                directory.mkdir(parents=True, exist_ok=True)
                names = os.listdir(directory)
            # One listing serves the whole open; the leftovers of an interrupted delete or
            # compaction swap are rare, and only they cost more listings.
            if any(name.endswith((DELETED_SUFFIX, CLEANED, SWAP)) for name in names):
                log._remove_deleted_files()
                log._complete_swaps()
                names = os.listdir(directory)
            log._load(names)
            log.names_at_open = names
            log._log_start_offset = min(max(log_start_offset, log._bases[0]), log._log_end_offset)
        except BaseException as e:
            log._close_fds()
            if isinstance(e, OSError):
                raise KafkaStorageError(directory, "open", e) from e
            raise
        return log

    def _load(self, names: list[str]) -> None:
        """The segments named in `names` (the directory's listing, swaps completed) loaded and recovered."""
        marker = self.directory / CLEAN_SHUTDOWN
        marked = CLEAN_SHUTDOWN in names
        clean = self.opened_clean = self.opened_clean or marked
        logs: set[int] = set()
        indexes: list[tuple[int, str]] = []  # names: a path is made only for an orphan
        for name in names:
            m = _SEGMENT_FILE.match(name)
            if m is None:
                continue
            if m.group(2) == "log":
                logs.add(int(m.group(1)))
            else:
                indexes.append((int(m.group(1)), name))
        removed = []
        for base, name in indexes:
            if base not in logs:  # left behind by a crash during delete or truncation
                (self.directory / name).unlink(missing_ok=True)
                removed.append(name)
        bases = sorted(logs)
        if not bases:
            self._segments = [self._segment(0, create=True)]
            self._bases = [0]
            self._dir_dirty = True
            if marked:
                marker.unlink(missing_ok=True)
            return
        next_offset = bases[0]
        listed = set(names)
        for index_file in removed:
            listed.discard(index_file)
        for i, base in enumerate(bases):
            seg = self._segment(base, create=False, pinned=False, names=listed)
            self._segments.append(seg)
            self._bases.append(base)
            last = i == len(bases) - 1
            if not seg.files_made:
                # Empty, no index files (Segment.__init__): what they would say is known.
                if last:
                    next_offset = base
                    self._dir_dirty = True  # perhaps made just now (make_new_log_dir): the next flush syncs the entry
                continue
            if clean and last and not (seg.index_existed or seg.time_index_existed):
                # Bytes but neither index file after a clean close: the close left them out, as
                # they held nothing the entry heads cannot say (Segment.write_indexes); both are
                # rebuilt from the heads the end offset is read from. Departure: Kafka recovers
                # a segment whose offset index is missing (its close always writes the files).
                next_offset = seg.files_omitted()
                continue
            if clean and seg.index_existed and seg.time_index_existed:
                # Kafka's LazyIndex: after a clean shutdown the indexes are read on first use
                # (broker.log.segment); the active segment's offset index now, for its end offset.
                seg.defer_indexes(offset_index=not last)
                trusted = not last or seg.load_index()
            else:
                trusted = (clean or not last) and seg.load_index() and seg.load_time_index()
            if trusted:
                if last:
                    next_offset = seg.next_offset_from_index()
                continue
            if self.recovered_epochs is None:
                self.recovered_epochs = []
            truncated, next_offset = seg.recover(epochs=self.recovered_epochs)
            self._unflushed.add(seg)
            if not last and not truncated:
                seg.write_indexes()  # trusted at the next open as an inactive segment
            if truncated and not last:
                for later in bases[i + 1:]:
                    self._segment(later, create=False, pinned=False).delete()
                self._dir_dirty = True
                break
        self._segments[-1].pin()  # the active segment keeps its descriptor
        self._log_end_offset = next_offset
        self._size = sum(s.size for s in self._segments)
        # Removed only now: a crash while loading must recover again next time.
        if marked:
            marker.unlink(missing_ok=True)

    # ---- properties ------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset after the last entry in the file: what readers, followers and the high
        watermark see. Appends in flight (`start_append`) are beyond it."""
        return self._log_end_offset

    @property
    def next_offset(self) -> int:
        """The next offset to be assigned: the log end offset plus the appends in flight."""
        return self._in_flight[-1].last_offset + 1 if self._in_flight else self._log_end_offset

    @property
    def appends_in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def active_segment(self) -> Segment | None:
        """The last segment, the one appends go to (no copy of the list); None before the log opens."""
        return self._segments[-1] if self._segments else None

    # ---- append ----------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, last_offset: int) -> int:
        """Append whole entries whose offsets are already assigned; returns their file position.

        `last_offset` is the offset of the last entry in `data`. The active segment rolls first
        if `data` would take it past `segment_bytes`; `data` is never split across segments.
        """
        self._check_open()
        if self._in_flight:
            self.settle_now()
            self._check_open()
        n = len(data)
        if n == 0:
            return self._segments[-1].size
        if n < HEADER.size:
            raise InvalidAppend(f"{n} bytes is not a whole entry")
        first_offset = HEADER.unpack_from(data, 0)[0]
        if first_offset < self._log_end_offset or last_offset < first_offset:
            raise InvalidAppend(f"entries at offsets {first_offset}..{last_offset} do not follow "
                                f"log end offset {self._log_end_offset}")
        active = self._segments[-1]
        try:
            if active.size > 0 and (active.size + n > self.segment_bytes
                                    or last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
                                    or self._time_to_roll(data)):
                active = self._roll()
            if active.size == 0:
                self._active_first_timestamp = max_timestamp(data)[0]
            pos = active.append(data, self._log_end_offset, self.page_cache_window)
        except OSError as e:
            # Nothing moved: the segment cut its files back (or says it could not), and the
            # log end offset, size and index are those from before the call.
            raise self._fail("append", e) from e
        self._log_end_offset = last_offset + 1
        self._size += n
        self._unflushed.add(active)
        return pos

    # ---- the two-phase append (broker.log.writer) ----------------------------------

    def start_append(self, data: bytes | bytearray | memoryview, last_offset: int) -> PendingAppend:
        """Place an append whose offsets are assigned (from `next_offset`) without writing it.

        The same checks and roll rule as `append`; a roll first waits for the appends in flight
        (rare: a roll never overtakes a write queued before it, and the old segment's indexes
        are written whole). The caller hands the result to its directory's `DirWriter`; once
        the thread has written it, `append_done` (on the loop, in order) moves the log end
        offset. Until then readers see nothing of it.
        """
        self._check_open()
        n = len(data)
        if n < HEADER.size:
            raise InvalidAppend(f"{n} bytes is not a whole entry")
        next_offset = self.next_offset
        first_offset = HEADER.unpack_from(data, 0)[0]
        if first_offset < next_offset or last_offset < first_offset:
            raise InvalidAppend(f"entries at offsets {first_offset}..{last_offset} do not follow "
                                f"next offset {next_offset}")
        active = self._segments[-1]
        try:
            reserved = active.size + self._in_flight_bytes
            if reserved > 0 and (reserved + n > self.segment_bytes
                                 or last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
                                 or self._time_to_roll(data)):
                if self._in_flight:
                    self.settle_now()
                    self._check_open()
                    if self.next_offset != next_offset:
                        # Appends settled failed unwritten (an earlier write of the directory
                        # failed): this one's offsets no longer follow, and nothing rolls.
                        raise KafkaStorageError(self.directory, "append", OSError(
                            errno.EIO, "appends before this one failed unwritten"))
                active = self._roll()
                reserved = 0
            if reserved == 0:
                self._active_first_timestamp = max_timestamp(data)[0]
            file, size = active.write_target()
        except OSError as e:
            raise self._fail("append", e) from e
        entry = PendingAppend(self, active, file, data, size + self._in_flight_bytes, next_offset, last_offset)
        self._in_flight.append(entry)
        self._in_flight_bytes += n
        return entry

    def append_done(self, entry: PendingAppend) -> None:
        """On the loop, in start order: the writer finished `entry` (written, or failed)."""
        if not self._in_flight or self._in_flight[0] is not entry:
            raise RuntimeError(f"append completed out of order in {self.directory}")
        self._in_flight.popleft()
        self._in_flight_bytes -= entry.size
        if entry.state == FAILED:
            error = entry.error
            if entry.attempted and error is not None and not isinstance(error, (Unwritten, WriterStopped)):
                # Its write failed (the thread cut the file back, or says it could not).
                self._fail("append", error)
            if not self._in_flight and self._segments and self._segments[-1].size == 0:
                self._active_first_timestamp = None
            return
        seg = entry.segment
        if self._closed or seg is not self._segments[-1]:
            # Cannot happen (closes, truncations and rolls settle first); were it to, the append
            # must not be answered as written: the writer marks it failed (a storage error).
            raise RuntimeError(f"append completed into a segment no longer active in {self.directory}")
        seg.written(entry.data, entry.first_key)
        self._log_end_offset = entry.last_offset + 1
        self._size += entry.size
        self._unflushed.add(seg)

    def settle_now(self) -> None:
        """Wait (blocking the loop, for the writes already queued) until no append is in flight,
        each completed as usual. What every other change of the log does first."""
        while self._in_flight:
            last = self._in_flight[-1]
            if last.writer is None:
                raise RuntimeError(f"an append of {self.directory} was started and never submitted")
            last.writer.wait(last)
            if self._in_flight and self._in_flight[-1] is last:  # its completion raised: no endless loop
                raise RuntimeError(f"an append of {self.directory} finished but was not completed")

    async def settle(self) -> None:
        """Until no append is in flight (the appends started so far completed)."""
        while self._in_flight:
            last = self._in_flight[-1]
            waiter = asyncio.get_running_loop().create_future()
            if last.waiters is None:
                last.waiters = []
            last.waiters.append(waiter)
            await waiter

    def _segment(self, base: int, *, create: bool, pinned: bool = True, names: set[str] | None = None) -> Segment:
        return Segment(self.directory, base, self.index_interval_bytes, create=create, pool=self.open_files,
                       pinned=pinned, names=names, pending=self.index_files)

    def _roll(self) -> Segment:
        if self.before_roll is not None:
            self.before_roll()
        old = self._segments[-1]
        # Kafka's onBecomeInactiveSegment: the old segment's time index ends with its maximum, and
        # both its indexes go to disk whole (a sealed segment's are trusted at the next open).
        old.append_final_time_entry()
        old.write_indexes()
        # Its page cache beyond its last step goes at the new segment's first append (held by
        # the file object until then, so an eviction cannot close it: broker.log.page_cache).
        behind = old.tail_cache
        sealed = None if self.page_cache_window < 0 or behind is None else (
            old.handle(), behind.kicked, behind.dropped, old.size)
        # The new base is the log end offset: every offset in what comes next is >= it, and it
        # lets an empty last segment tell the log end offset after a restart. The old segment
        # gives its descriptor to the pool first, so a full pool can evict it for the new one.
        old.unpin()
        try:
            seg = self._segment(self._log_end_offset, create=True)
        except BaseException:
            old.pin()  # still the active segment: it reopens on its next append if it was evicted
            raise
        if sealed is not None:
            seg.tail_cache = TailCache()
            seg.tail_cache.sealed = sealed
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        self._active_created_ms = self._clock()
        self._active_first_timestamp = None
        return seg

    # ---- read ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = False, allow_partial: bool = True, whole_entries: bool = False) -> FileSlice:
        """Kafka's fetch read (KIP-74) from one segment.

        The slice starts at the first entry whose offset is >= `offset` (so a fetch from inside
        a compressed wrapper gets the whole wrapper), stops before the first entry whose offset is
        >= `max_offset`, and holds at most `max_bytes`, possibly ending inside an entry (as
        Kafka's; `whole_entries` ends it after the last entry that fits instead). If the
        first entry alone exceeds `max_bytes`: `min_one_message` returns it whole, otherwise
        `allow_partial` (Fetch v0-v2) returns its first `max_bytes` bytes and not
        `allow_partial` (Fetch v3) returns nothing.
        """
        self._check_open()
        try:
            return self._read(offset, max_bytes, max_offset, min_one_message, allow_partial, whole_entries)
        except OSError as e:
            raise self._fail("read", e) from e

    def _read(self, offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool,
              allow_partial: bool, whole_entries: bool) -> FileSlice:
        leo = self._log_end_offset
        if offset == leo:
            active = self._segments[-1]
            return FileSlice(active.handle(), active.size, 0)
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRange(offset, self._log_start_offset, leo)
        i = bisect_right(self._bases, offset) - 1
        if max_offset is not None and max_offset <= offset:
            seg = self._segments[i]
            return FileSlice(seg.handle(), 0, 0)
        segments = self._segments
        while i < len(segments):
            seg = segments[i]
            key, pos = seg.lookup_near(offset)
            start, first_size, _ = seg.find(offset, pos, seg.size, key)
            if first_size:
                break
            # Nothing at or after `offset` in this segment (a gap at its end): Kafka moves on.
            i += 1
        else:
            active = segments[-1]
            return FileSlice(active.handle(), active.size, 0)
        limit = max(max_bytes, first_size) if min_one_message else max_bytes
        if limit <= 0 or (limit < first_size and not allow_partial):
            return FileSlice(seg.handle(), start, 0)
        end = min(seg.size, start + limit)
        if max_offset is not None:
            seg_next = segments[i + 1].base_offset if i + 1 < len(segments) else leo
            if max_offset < seg_next:
                _, mpos = seg.lookup_near(max_offset)
                # Scan to the segment's end, not to `end`: the bounding entry may start before
                # `end` with its header reaching past it.
                bound, _, _ = seg.find(max_offset, max(mpos, start), seg.size, 0)
                end = min(end, bound)
        if whole_entries and end < seg.size and end > start + first_size:
            end = seg.whole_entries_end(start + first_size, end)
        return FileSlice(seg.handle(), start, end - start)

    # ---- lookup by timestamp ---------------------------------------------------------

    def offset_for_timestamp(self, target: int) -> tuple[int, int, int] | None:
        """(timestamp, offset, leader epoch) of the first record whose timestamp is >= target, or
        None (Kafka's Log.fetchOffsetByTimestamp for a timestamp >= 0).

        As Kafka: only the first segment whose largest timestamp (else its last-modified time)
        reaches target is searched; a search there that finds nothing answers None.
        """
        self._check_open()
        try:
            for seg in self._segments:
                if seg.largest_timestamp >= target:
                    return seg.find_offset_by_timestamp(target, self._log_start_offset)
            return None
        except OSError as e:
            raise self._fail("read", e) from e

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int, now_ms: int) -> list[int]:
        """ListOffsets v0's answer (Kafka's Log.legacyFetchOffsetsBefore): segment base offsets by
        last-modified time, newest first; see broker.log.time_index.legacy_offsets."""
        self._check_open()
        try:
            points = [(seg.base_offset, seg.last_modified_ms) for seg in self._segments]
        except OSError as e:
            raise self._fail("read", e) from e
        if self._segments[-1].size > 0:
            points.append((self._log_end_offset, now_ms))
        return legacy_offsets(points, timestamp, max_num_offsets)

    # ---- retention (broker.log.retention decides; these carry it out) -------------------

    def segment_stats(self) -> list[SegmentStat]:
        """Each segment's base offset, size and largest timestamp, oldest first (retention's input)."""
        self._check_open()
        try:
            return [SegmentStat(seg.base_offset, seg.size, seg.largest_timestamp) for seg in self._segments]
        except OSError as e:
            raise self._fail("read", e) from e

    def delete_oldest_segments(self, count: int) -> list[Segment]:
        """Remove the oldest `count` segments (never the active one) and move the log start offset.

        Kafka's asynchronous delete: the files are renamed to `.deleted` now and their fds stay
        open, so slices already handed out stay readable; pass the returned segments to
        `finish_delete` later (`file.delete.delay.ms`). Returns [] when nothing is deleted.
        """
        self._check_open()
        self.settle_now()
        count = min(count, len(self._segments) - 1)
        if count <= 0:
            return []
        gone = self._segments[:count]
        try:
            for seg in gone:
                for path in (seg.log_path, seg.index_path, seg.time_index_path):
                    if path.exists():
                        path.rename(path.with_name(path.name + DELETED_SUFFIX))
        except OSError as e:
            raise self._fail("delete segments", e) from e
        for seg in gone:
            self._unflushed.discard(seg)
        del self._segments[:count]
        del self._bases[:count]
        self._size = sum(s.size for s in self._segments)
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        self._dir_dirty = True
        self._pending_deletes.append(gone)
        return gone

    def finish_delete(self, segments: list[Segment]) -> None:
        """Close and unlink segments `delete_oldest_segments` renamed (Kafka's delayed "delete-file")."""
        if segments not in self._pending_deletes:
            return  # the log was closed or deleted meanwhile: its close handled them
        self._pending_deletes.remove(segments)
        for seg in segments:
            seg.close()
            for path in (seg.log_path, seg.index_path, seg.time_index_path):
                path.with_name(path.name + DELETED_SUFFIX).unlink(missing_ok=True)

    @property
    def pending_deletes(self) -> int:
        """Segments renamed `.deleted` whose files are still open."""
        return sum(len(p) for p in self._pending_deletes)

    def _remove_deleted_files(self) -> None:
        # Kafka's loadSegmentFiles: `.deleted` files left by a crash go at open.
        for path in self.directory.iterdir():
            if path.name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)

    def _time_to_roll(self, data: bytes | bytearray | memoryview) -> bool:
        active = self._segments[-1]
        if self._active_first_timestamp is None and active.size > 0:
            # Kafka's loadFirstBatchTimestamp: the first entry's (max) timestamp, read once.
            head = os.pread(active.fd, TIME_HEAD_SIZE, 0)
            self._active_first_timestamp = time_head(head + bytes(TIME_HEAD_SIZE), 0)[1]
        first = self._active_first_timestamp
        # The incoming batches' timestamp matters only against a first batch that has one: one head
        # unpack per batch, and none at all for a log of magic-0 messages.
        incoming = max_timestamp(data)[0] if first is not None and first >= 0 else -1
        return should_roll_on_time(active.size, self.segment_ms, first, self._active_created_ms, incoming,
                                   self._clock)

    # ---- truncation ------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every entry holding an offset >= `offset` (a follower cutting to its high watermark).

        A compressed wrapper straddling `offset` goes whole, so the log end offset becomes the
        offset after the last kept entry, which may be below `offset`.
        """
        self._check_open()
        self.settle_now()
        if offset >= self._log_end_offset:
            return
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        try:
            self._truncate_to(offset)
        except OSError as e:
            raise self._fail("truncate", e) from e

    def _truncate_to(self, offset: int) -> None:
        i = bisect_right(self._bases, offset) - 1
        for seg in self._segments[i + 1:]:
            self._unflushed.discard(seg)
            seg.delete()
        if len(self._segments) > i + 1:
            self._dir_dirty = True
        del self._segments[i + 1:]
        del self._bases[i + 1:]
        seg = self._segments[i]
        key, pos = seg.lookup(offset)
        cut, _, next_offset = seg.find(offset, pos, seg.size, key)
        seg.truncate_to_position(cut)
        seg.truncate_time_index(next_offset)
        self._unflushed.add(seg)
        self._log_end_offset = next_offset
        self._size = sum(s.size for s in self._segments)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset` (a follower behind its leader's log start)."""
        self._check_open()
        self.settle_now()
        try:
            for seg in self._segments:
                self._unflushed.discard(seg)
                seg.delete()
            seg = self._segment(offset, create=True)
        except OSError as e:
            raise self._fail("truncate", e) from e
        self._segments = [seg]
        self._bases = [offset]
        self._log_end_offset = offset
        self._log_start_offset = offset
        self._size = 0
        self._dir_dirty = True
        self._active_created_ms = self._clock()
        self._active_first_timestamp = None

    # ---- compaction: swapping a cleaned segment in (broker.log.cleaner) ---------------

    def cleaned_path(self, base_offset: int, kind: str) -> Path:
        """Where the cleaner writes the `kind` file (log, index, timeindex) of a cleaned segment."""
        return self.directory / f"{segment_name(base_offset)}.{kind}{CLEANED}"

    def replace_segments(self, old: list[Segment], sizes: list[int],
                         fault_point: Callable[[str], None] | None = None) -> list[Segment] | None:
        """Swap the cleaned copy of `old` (written at `cleaned_path(old[0].base_offset, ...)`) in.

        Kafka's Log.replaceSegments: the cleaned files become `.swap`, the old segments' files
        `.deleted`, the `.swap` files the segment's own names; a crash anywhere leaves either
        the old segments or the cleaned one whole (see `_complete_swaps`). Synchronous: no append
        or read runs in between. Returns the replaced segments, their fds still open so that
        slices handed out stay readable (`finish_delete` closes them later), or None when `old`
        is no longer a run of this log's inactive segments with those sizes (a truncation or a
        deletion came first): then nothing changes and the cleaned files are removed.
        `fault_point` (tests' crash injection) is called with "swapped" and "replacing".
        """
        point = fault_point or _no_fault
        self._check_open()
        self.settle_now()
        base = old[0].base_offset
        try:
            i = next(k for k, seg in enumerate(self._segments) if seg is old[0])
        except StopIteration:
            i = -1
        run = self._segments[i:i + len(old)] if i >= 0 else []
        if (len(run) != len(old) or any(a is not b for a, b in zip(run, old, strict=True))
                or i + len(old) >= len(self._segments) or [s.size for s in old] != sizes):
            for kind in _SWAP_ORDER:
                self.cleaned_path(base, kind).unlink(missing_ok=True)
            return None
        name = segment_name(base)
        try:
            for kind in _SWAP_ORDER:
                os.rename(self.cleaned_path(base, kind), self.directory / f"{name}.{kind}{SWAP}")
            fsync_dir(self.directory)
            point("swapped")
            for seg in old:
                for path in (seg.index_path, seg.time_index_path, seg.log_path):
                    if path.exists():
                        os.rename(path, path.with_name(path.name + DELETED_SUFFIX))
            point("replacing")
            for kind in _SWAP_ORDER:
                os.rename(self.directory / f"{name}.{kind}{SWAP}", self.directory / f"{name}.{kind}")
            fsync_dir(self.directory)
            new = self._segment(base, create=False, pinned=False)
            if not (new.load_index() and new.load_time_index()):
                new.recover()
                new.write_indexes()
        except OSError as e:
            raise self._fail("replace", e) from e
        self._segments[i:i + len(old)] = [new]
        self._bases[i:i + len(old)] = [base]
        for seg in old:
            self._unflushed.discard(seg)
        self._size = sum(s.size for s in self._segments)
        self._pending_deletes.append(old)
        return old

    def _complete_swaps(self) -> None:
        """At open: finish what a crash interrupted in `replace_segments` (Kafka's Log.loadSegmentFiles
        and completeSwapOperations).

        `.cleaned` files were never swapped in: removed. `.deleted` files were replaced: removed.
        A `<base>.log.swap` is a whole cleaned segment: every segment whose base lies in its offset
        range is one it replaces and goes, then the `.swap` files take the segment's names. A
        `.index.swap` or `.timeindex.swap` without its `.log.swap` belongs to an interrupted rename
        (the log file moves last), and goes; the segment's index is then rebuilt by recovery.
        """
        swaps: list[int] = []
        strays: list[Path] = []
        for path in list(self.directory.iterdir()):
            if path.name.endswith(CLEANED) or path.name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)
                self._dir_dirty = True
                continue
            m = _SWAP_FILE.match(path.name)
            if m is None:
                continue
            if m.group(2) == "log":
                swaps.append(int(m.group(1)))
            else:
                strays.append(path)
        for path in strays:
            if int(path.name[:20]) not in swaps:
                path.unlink(missing_ok=True)
        for base in sorted(swaps):
            name = segment_name(base)
            swap_log = self.directory / f"{name}.log{SWAP}"
            end = _next_offset_of_file(swap_log, base)
            for path in list(self.directory.iterdir()):
                m = _SEGMENT_FILE.match(path.name)
                if m is None or not base <= int(m.group(1)) < max(end, base + 1):
                    continue
                renamed = not (self.directory / f"{name}.{m.group(2)}{SWAP}").exists()
                if int(m.group(1)) == base and m.group(2) != "log" and renamed:
                    continue  # the cleaned segment's own index, renamed just before the crash
                path.unlink()
            for kind in _SWAP_ORDER:
                swap = self.directory / f"{name}.{kind}{SWAP}"
                if swap.exists():
                    os.rename(swap, self.directory / f"{name}.{kind}")
            self._dir_dirty = True
        if self._dir_dirty:
            fsync_dir(self.directory)

    # ---- durability and lifetime -----------------------------------------------------

    def flush(self, sync_dir: bool = True, closing: bool = False) -> None:
        """fsync every segment written since the last flush, and the directory if files changed
        (unless `sync_dir` is False: close fsyncs it once, after its marker). `closing`: the
        close's, which may leave the active segment's index files out (Segment.write_indexes)."""
        self._check_open()
        self.settle_now()
        active = self._segments[-1]
        try:
            for seg in self._unflushed:
                seg.flush(closing=closing and seg is active)
            self._unflushed.clear()
            if self._dir_dirty and sync_dir:
                fsync_dir(self.directory)
                self._dir_dirty = False
        except OSError as e:
            raise self._fail("flush", e) from e

    def close(self, durable: bool = True) -> None:
        """Flush, close every fd and leave the clean-shutdown marker. Idempotent.

        Not `durable` (the broker's shutdown): everything is written but nothing fsynced and no
        marker left; the caller syncs the file system once for every log, then calls
        `mark_clean_shutdown`, then syncs again (one syncfs instead of ~5 fsyncs a partition)."""
        if self._closed:
            return
        self.settle_now()
        if not durable and self._failed is None:
            try:
                active = self._segments[-1]
                active.append_final_time_entry()
                self._unflushed.add(active)
                for seg in self._unflushed:
                    seg.write_indexes(closing=seg is active)
                self._unflushed.clear()
            except OSError as e:
                self._close_fds()
                raise self._fail("close", e) from e
            self._close_fds()
            return
        if self._failed is not None:
            # No clean-shutdown marker: the next open must validate what is on disk.
            self._close_fds()
            return
        try:
            try:
                # Kafka's LogSegment.close: the active segment's time index ends with its maximum.
                active = self._segments[-1]
                active.append_final_time_entry()
                active.write_indexes(closing=True)
            except OSError as e:
                raise self._fail("close", e) from e
            self.flush(sync_dir=False, closing=True)  # the marker's directory fsync below covers the directory
        except KafkaStorageError:
            self._close_fds()
            raise
        self._close_fds()
        try:
            marker = self.directory / CLEAN_SHUTDOWN
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.close(fd)
            fsync_dir(self.directory)
        except OSError as e:
            raise KafkaStorageError(self.directory, "close", e) from e

    def mark_clean_shutdown(self) -> None:
        """The marker a `close(durable=False)` left out, once the caller has synced its files."""
        try:
            os.close(os.open(self.directory / CLEAN_SHUTDOWN, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        except OSError as e:
            raise KafkaStorageError(self.directory, "close", e) from e

    def abandon(self) -> None:
        """Close every fd, writing nothing: a log in a failed directory, left for the next open to recover."""
        self._close_fds()

    def delete(self) -> None:
        """Close the log and remove its directory."""
        self._close_fds()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _close_fds(self) -> None:
        self.settle_now()  # the writer thread holds none of these descriptors after this
        for seg in self._segments:
            seg.close()
        for pending in self._pending_deletes:
            for seg in pending:
                seg.close()
        self._closed = True

    @property
    def failed(self) -> KafkaStorageError | None:
        """The storage error that failed this log, if any."""
        return self._failed

    def _fail(self, operation: str, error: OSError) -> KafkaStorageError:
        err = KafkaStorageError(self.directory, operation, error)
        # Out of descriptors (EMFILE/ENFILE) is not a failed disk: the call wrote nothing (a roll
        # that could not open its new segment left the old one active), so the log stays usable
        # and the next call may succeed once descriptors are free.
        if self._failed is None and not is_descriptor_exhaustion(error):
            self._failed = err
        return err

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self.directory} is closed")
        failed = self._failed
        if failed is not None:
            raise KafkaStorageError(self.directory, failed.operation, failed.error)

    def __repr__(self) -> str:
        return (f"Log({self.directory}, start={self.log_start_offset}, end={self._log_end_offset}, "
                f"segments={len(self._segments)}, bytes={self._size})")


def make_new_log_dir(directory: Path) -> bool:
    """A new partition's directory and its empty first segment file, made ahead of `Log.open` (on
    a worker thread: a LeaderAndIsr creating thousands of partitions makes them several at once,
    off the event loop). The open then takes them as a log that never had a byte, which they are.
    False, touching nothing more, if the directory exists already or anything fails: the open
    meets it as it always did (an existing log, or a storage error handled there)."""
    try:
        os.mkdir(directory)
    except OSError:
        return False
    try:
        os.close(os.open(directory / f"{segment_name(0)}.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError:
        return False
    return True


def remove_new_log_dir(directory: Path) -> bool:
    """Undoes `make_new_log_dir` for a partition no state opened after all: its empty first
    segment and the directory go, only while they are still exactly that (bytes in the segment,
    or any other file there, and it is left alone). True if removed."""
    first = f"{segment_name(0)}.log"
    try:
        if os.listdir(directory) != [first] or os.stat(directory / first).st_size:
            return False
        os.unlink(directory / first)
        os.rmdir(directory)
    except OSError:
        return False
    return True


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _no_fault(point: str) -> None:
    pass


def _next_offset_of_file(path: Path, base: int) -> int:
    """The offset after the last whole entry of a segment file (a swap file, at open)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos, next_offset = 0, base
        buf, buf_start = b"", 0
        while pos + HEADER.size <= size:
            rel = pos - buf_start
            if rel + _LAST_DELTA_AT + 4 > len(buf):
                buf = os.pread(fd, min(_SCAN_CHUNK, size - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER.size:
                    break
            offset, length = HEADER.unpack_from(buf, rel)
            if length <= 0 or pos + HEADER.size + length > size:
                break
            if rel + _LAST_DELTA_AT + 4 <= len(buf) and buf[rel + 16] == _BATCH_MAGIC:
                offset += int.from_bytes(buf[rel + _LAST_DELTA_AT:rel + _LAST_DELTA_AT + 4], "big", signed=True)
            next_offset = offset + 1
            pos += HEADER.size + length
        return next_offset
    finally:
        os.close(fd)
