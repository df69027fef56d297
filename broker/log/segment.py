"""One log segment: `<base>.log` holding message-set entries and its sparse `<base>.index`.

Entries of either format, mixed in one file (logs written before RecordBatch v2 hold magic 1):
- message format v0/v1: `offset i64, size i32, message[size]`, the message starting with a
  CRC-32 of its remaining bytes; the entry's offset is that of its *last* logical message (a
  compressed wrapper carries its last inner offset);
- RecordBatch v2: `baseOffset i64, batchLength i32, ...` (the same 12-byte head), its magic at
  the same byte 16, a CRC32C over attributes..end, and its last offset is baseOffset +
  lastOffsetDelta (header bytes 23-27). Scans read those 27 bytes of each entry.
An entry's "last offset" below means either.

Index entries are `(relative offset u32, position u32)`, big-endian. The key stored for the entry
at `position` is the log end offset just before that entry was written (previous entry's offset
+ 1), not the entry's own offset: it is a lower bound of every logical offset inside the entry, so
a lookup for an offset that falls inside a compressed wrapper lands on that wrapper instead of an
earlier index point, and truncation at an indexed position knows the new log end offset exactly.
Every entry before `position` holds only offsets below the key, which is all a lookup needs.

Beside them `<base>.timeindex` (broker.log.time_index: Kafka's format and rules), with entries at
the same index points, and the segment's largest timestamp with the offset that carries it.
Appends read timestamps through protocol.records.records (one head per entry or batch, any magic).

Descriptors (broker.log.open_files): only the `.log` file is ever held open, and only the active
segment's for good; an older segment's is opened on demand and given back under the bound. Both
index files hold no descriptor: appends add their points in memory, and `write_indexes` writes
what the files lack at roll, flush and close (Kafka's indexes are mmap'd and flushed then too).
An active segment's index files are therefore only trusted after a clean shutdown, which is what
recovery already assumed: after a kill the last segment is rebuilt from its log. A segment that
holds no bytes needs no index files: missing ones stand for empty ones, so none is created for
it at a shutdown and an open neither recovers nor rebuilds it (broker.log.index_files). Nor does
an active segment whose indexes say nothing its entry heads cannot (no offset-index point, so at
most an index interval and one append of bytes; a time index of only the close's final entry):
its close leaves both files out, and a clean open rebuilds both from the heads it reads for the
log end offset anyway (`files_omitted`). 10,000 partitions with a message each made 20,000 files
at a SIGTERM, most of its time; a file is made once it would hold more (a roll, an index point).

Lazy indexes (Kafka's LazyIndex): after a clean shutdown the log opens a segment with
`defer_indexes()` instead of reading its index files, and each index is read on first use (a
lookup, an append, a truncation, a timestamp question), exactly as `load_index` and
`load_time_index` would have read it at open. Every access to the in-memory indexes goes through
`_need_index` / `_need_time` (or the `time_index` / `timestamps` properties, which call it); a
write or fsync of an index never loaded has nothing the file lacks, so it loads nothing. A file
that turns out torn or inconsistent when read that late is rebuilt from the log without cutting it
(the log was closed cleanly; cutting a middle segment would break the log's contiguity) and
rewritten. One lock serialises the loads, so the thread that opened the log (a load worker) and the
event loop never load one segment's index twice or concurrently; once loaded, the flags are only
read.
"""

from __future__ import annotations

import os
import sys
import threading
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

import crc32c
import structlog

from broker.log.index_files import PendingIndexFiles
from broker.log.open_files import SEGMENT_FILES, OpenFile, OpenFiles
from broker.log.page_cache import TailCache
from broker.log.small_files import read_small
from broker.log.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE
from broker.log.time_index import TimeIndex, TimestampTracker
from protocol.layouts import (
    MAGIC_OFFSET,
    RECORD_BATCH_CRC_FROM,
    LogEntryHead,
    MessageV0Head,
    RecordBatchHeader,
    fixed,
    offset_of,
    size_of,
)
from protocol.records.crc import crc32
from protocol.records.records import TIME_HEAD_SIZE, first_at_or_after, max_timestamp, time_head

# Layouts are declared once, in protocol.layouts; these are the struct forms derived from them.
HEADER = fixed(LogEntryHead)  # offset i64, size i32
HEADER_SIZE = HEADER.size  # 12
_CRC = fixed(MessageV0Head, "crc", "crc")
# crc, magic, attributes, then the int32 lengths of a null key and a null value: the smallest
# v0 message (14 bytes).
MIN_MESSAGE_SIZE = size_of(MessageV0Head) - HEADER_SIZE + 2 * 4
U32_MAX = 0xFFFFFFFF
# RecordBatch v2 (magic 2): its first 8 bytes are the batch's base offset, and its last offset is
# base + lastOffsetDelta, read from the header; a magic-0/1 entry's offset is its last offset.
_BATCH_MAGIC = 2
_V2_CRC = fixed(RecordBatchHeader, "crc", "crc")
_V2_CRC_AT = offset_of(RecordBatchHeader, "crc")
_V2_LAST_DELTA = fixed(RecordBatchHeader, "last_offset_delta", "last_offset_delta")
_V2_LAST_DELTA_AT = offset_of(RecordBatchHeader, "last_offset_delta")  # 23
_V2_EPOCH = fixed(RecordBatchHeader, "partition_leader_epoch", "partition_leader_epoch")
_V2_EPOCH_AT = offset_of(RecordBatchHeader, "partition_leader_epoch")  # 12
_PEEK = _V2_LAST_DELTA_AT + _V2_LAST_DELTA.size  # 27: what a scan reads of each entry's head
MIN_BATCH_SIZE = size_of(RecordBatchHeader) - HEADER_SIZE  # 49
# Reads start at an index point at most ~index_interval bytes before the wanted entry, so one
# pread of this size usually covers the whole forward scan.
READ_CHUNK = 16 * 1024
RECOVER_CHUNK = 1 << 20
_LITTLE = sys.byteorder == "little"
# Serialises the first-use loads of deferred indexes (module docstring); held only while loading.
_LAZY_LOAD = threading.Lock()
# Held by make_files (a worker thread) for one segment's two creations and by close: a segment
# closed (deleted, truncated away, its partition removed) gets no file made after, so no orphan
# index appears in a directory rmtree is emptying (its rmdir would fail and leave it behind).
_MAKING_FILES = threading.Lock()
log = structlog.get_logger()


class RollbackFailed(OSError):
    """An append failed and cutting the files back to their sizes before it failed as well."""

    def __init__(self, error: OSError, rollback_error: OSError) -> None:
        super().__init__(error.errno, f"{error.strerror}; rolling back failed too: {rollback_error}", error.filename)
        self.rollback_error = rollback_error


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def _u32_array() -> array[int]:
    a = array("I")
    if a.itemsize != 4:  # pragma: no cover - every platform we run on has 4-byte unsigned int
        a = array("L")
    return a


class Segment:
    """A segment's files, its in-memory indexes and the bookkeeping appends need.

    The log file is opened with O_APPEND; that one descriptor serves appends, preads and
    `sendfile`. An active (pinned) segment keeps it; an inactive one may give it back to the pool
    (broker.log.open_files) and reopens on the next read. Slices hold the `OpenFile`, so they stay
    readable after a roll, an eviction or a close.
    """

    __slots__ = ("base_offset", "log_path", "size", "index_interval", "index_existed",
                 "_keys", "_positions", "_bytes_since_index", "_tail_key", "_tail_pos", "time_index_existed",
                 "_time_index", "_timestamps", "_file", "_pool", "_pinned", "_closed", "_index_on_disk",
                 "_time_on_disk", "_index_cut", "_time_cut", "_files_made", "_index_lazy", "_time_lazy",
                 "_pending", "tail_cache", "__weakref__")

    def __init__(self, directory: Path, base_offset: int, index_interval: int, *, create: bool,
                 pool: OpenFiles | None = None, pinned: bool = True,
                 names: frozenset[str] | set[str] | None = None,
                 pending: PendingIndexFiles | None = None) -> None:
        self.base_offset = base_offset
        name = segment_name(base_offset)
        # One path object: the index files' are made when used (a log's open needs neither).
        self.log_path = directory / f"{name}.log"
        self.index_interval = index_interval
        self._pool = pool or SEGMENT_FILES
        self._pinned = pinned
        self._closed = False
        self._file: OpenFile | None = None
        # A missing index would read as an empty, valid-looking one: remember it.
        # `names`: the directory's listing, when the caller has one (a log's open): no stat each.
        if names is None:
            self.index_existed = not create and self.index_path.exists()
            self.time_index_existed = not create and self.time_index_path.exists()
        else:
            self.index_existed = not create and f"{name}.index" in names
            self.time_index_existed = not create and f"{name}.timeindex" in names
        self._index_on_disk = self._time_on_disk = 0  # entries the files hold (in step with memory)
        self._index_cut = self._time_cut = False  # truncated in memory: the file holds more than on_disk
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
        if create:
            flags |= os.O_TRUNC
        self._file = self._pool.open(self.log_path, flags)
        # A new segment's index files are made by the background pass (`make_files`, registered
        # in `pending`) or by its first `write_indexes` (roll, flush, close) that has something to
        # write: two file creations fewer per new partition. Until then a kill leaves it the last
        # segment, which recovery rebuilds anyway. A stale pair from an earlier life goes now.
        if create:
            for path in (self.index_path, self.time_index_path):
                path.unlink(missing_ok=True)
        self.size = os.fstat(self._file.fd).st_size
        # An empty segment opened with neither index file (its files were never made: a shutdown
        # creates none for a segment without bytes) has empty indexes, which is all the missing
        # files could have said (broker.log.index_files). It is registered for the background pass
        # at its first append, not now: 10,000 of them made at a restart would compete with it.
        self._files_made = not create and (self.size > 0 or self.index_existed or self.time_index_existed)
        self._pending = pending
        if create and pending is not None:
            pending.add(self)
        self.tail_cache: TailCache | None = None  # made at the first append that follows a window
        if not pinned:
            self._pool.idle(self)
        self._keys = _u32_array()
        self._positions = _u32_array()
        self._bytes_since_index = 0
        # Where the latest append's first entry starts (relative key, position; -1: none known),
        # a starting point for readers at the tail (`lookup_near`).
        self._tail_key = self._tail_pos = -1
        self._time_index = TimeIndex(base_offset)
        self._timestamps = TimestampTracker()
        self._index_lazy = self._time_lazy = False  # see defer_indexes

    # ---- lazy indexes ----------------------------------------------------------------

    def defer_indexes(self, offset_index: bool = True) -> None:
        """Read the time index (and the offset index if `offset_index`) on first use instead of
        now: the log was closed cleanly and both files exist (module docstring)."""
        self._index_lazy = offset_index
        self._time_lazy = True

    def files_omitted(self) -> int:
        """Both indexes rebuilt from the log's entry heads, for a last segment a clean close left
        without index files (`write_indexes(closing=True)`: they would have held nothing the heads
        cannot say); returns the log end offset. The open reads those heads for the end offset in
        any case (after the last index point, which is position 0 here): one scan, no file read,
        and no file made until one is needed. Points are placed as recovery places them; with
        no index point before the close (at most an index interval and one append) that is none.
        Trusted, like the indexes of a clean close: nothing is validated or cut."""
        base, interval, fd, end = self.base_offset, self.index_interval, self.fd, self.size
        keys, positions = _u32_array(), _u32_array()
        tindex, tracker = TimeIndex(base), TimestampTracker()
        since = pos = buf_start = 0
        next_offset = base
        buf = b""
        # `_heads` inlined, in larger reads: this runs for every partition at a restart.
        while pos + HEADER_SIZE <= end:
            rel = pos - buf_start
            if rel + TIME_HEAD_SIZE > len(buf) and buf_start + len(buf) < end:
                buf = os.pread(fd, min(RECOVER_CHUNK, end - pos), pos)
                buf_start, rel = pos, 0
            if rel + HEADER_SIZE > len(buf):
                break
            size, ts, last, _ = time_head(buf, rel) if rel + TIME_HEAD_SIZE <= len(buf) \
                else time_head(buf[rel:] + bytes(TIME_HEAD_SIZE), 0)
            if size < HEADER_SIZE + MIN_MESSAGE_SIZE or pos + size > end:
                break  # a torn tail: not a clean close's (the end offset stops before it, as `find`'s)
            if ts > tracker.max_timestamp:
                tracker.max_timestamp, tracker.offset_of_max = ts, last
            if since > interval:
                keys.append(next_offset - base)
                positions.append(pos)
                tindex.maybe_append(tracker.max_timestamp, tracker.offset_of_max)
                since = 0
            since += size
            next_offset = last + 1
            pos += size
        tindex.maybe_append(tracker.max_timestamp, tracker.offset_of_max)  # the final entry, as a close's
        self._keys, self._positions = keys, positions
        self._bytes_since_index = since + (end - pos)  # as load_index counts them: to the file's end
        self._time_index, self._timestamps = tindex, tracker
        self._index_on_disk = self._time_on_disk = 0
        self._files_made = False
        return next_offset

    @property
    def indexes_loaded(self) -> bool:
        return not (self._index_lazy or self._time_lazy)

    def _need_index(self) -> None:
        if self._index_lazy:
            with _LAZY_LOAD:
                if self._index_lazy:
                    ok = self.load_index()
                    self._index_lazy = False  # after the load: another thread sees it only once done
                    if not ok:
                        self._rebuild("index")

    def _need_time(self) -> None:
        if self._time_lazy:
            with _LAZY_LOAD:
                if self._time_lazy:
                    ok = self.load_time_index()
                    self._time_lazy = False
                    if not ok:
                        self._rebuild("timeindex")

    def _rebuild(self, which: str) -> None:
        """A deferred index file read torn or inconsistent: both indexes rebuilt from the log (not
        cut: it was closed cleanly) and written at once. Called holding _LAZY_LOAD."""
        log.warning("segment.index_rebuilt", path=str(self.log_path), index=which)
        self._index_lazy = self._time_lazy = False
        self.recover(cut=False)
        self.write_indexes()

    @property
    def time_index(self) -> TimeIndex:
        self._need_time()
        return self._time_index

    @property
    def timestamps(self) -> TimestampTracker:
        self._need_time()
        return self._timestamps

    @property
    def index_path(self) -> Path:
        return self.log_path.with_suffix(".index")

    @property
    def time_index_path(self) -> Path:
        return self.log_path.with_suffix(".timeindex")

    def _sibling(self, suffix: str) -> str:
        """An index file's path as a string: what a read needs, without pathlib's parsing
        (with_suffix: ~20 µs, a tenth of a partition's open at start-up)."""
        return os.fspath(self.log_path)[:-4] + suffix

    # ---- the descriptor --------------------------------------------------------------

    @property
    def fd(self) -> int:
        """The log file's descriptor, reopened if it was given back; -1 once closed."""
        f = self._file
        if f is None:
            if self._closed:
                return -1
            f = self._file = self._pool.open(self.log_path, os.O_RDWR | os.O_APPEND)
            if not self._pinned:
                self._pool.idle(self)
        elif not self._pinned:
            self._pool.idle(self)  # most recently used: the last to be evicted
        return f.fd

    def handle(self) -> OpenFile:
        """The `OpenFile` behind `fd`, for a slice that must outlive an eviction."""
        self.fd  # noqa: B018 - opens it if needed
        assert self._file is not None
        return self._file

    @property
    def has_descriptor(self) -> bool:
        return self._file is not None

    def pin(self) -> None:
        """Active: keeps its descriptor until unpinned or closed."""
        self._pinned = True
        self._pool.busy(self)

    def unpin(self) -> None:
        self._pinned = False
        if self._file is not None:
            self._pool.idle(self)

    def release_file(self) -> None:
        """The pool's eviction: drop the descriptor (a slice still holding it keeps it open)."""
        self._file = None

    # ---- the index files -------------------------------------------------------------

    def write_indexes(self, sync: bool = False, closing: bool = False) -> None:
        """Write what the index files lack (cutting what they hold beyond memory), fsync if `sync`.

        An index still deferred holds nothing the file lacks: it is only fsynced if `sync`.
        `closing`: the log's close of its active segment, which makes no file (the two creations
        were most of a 10,000-partition shutdown's system time) when they would hold nothing a scan
        of the log cannot say: no offset-index point, at most the final time entry. The next
        clean open takes the missing pair as that (`files_omitted`)."""
        if not self._files_made and self._omit_files(closing):
            return
        if self._index_lazy or self._time_lazy:
            self._sync_deferred(sync)
        keys = len(self._keys)
        times = len(self._time_index)
        if self._index_lazy:
            pass
        elif keys != self._index_on_disk or sync or self._index_cut or not self._files_made:
            fd = os.open(self.index_path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                on_disk = min(self._index_on_disk, keys)
                # Only when the file holds more: a truncation to 0 makes ext4 (auto_da_alloc) flush
                # the file's data at close, ~40% of a shutdown's index writes (py-spy).
                if self._index_cut:
                    os.ftruncate(fd, on_disk * 8)
                if keys > on_disk:
                    pairs = _u32_array()
                    for k, p in zip(self._keys[on_disk:], self._positions[on_disk:], strict=True):
                        pairs.append(k)
                        pairs.append(p)
                    if _LITTLE:
                        pairs.byteswap()
                    _pwrite_all(fd, pairs.tobytes(), on_disk * 8)
                if sync:
                    os.fsync(fd)
            except OSError as e:
                raise OSError(e.errno, e.strerror, str(self.index_path)) from e
            finally:
                os.close(fd)
            self._index_on_disk = keys
            self._index_cut = False
        if self._time_lazy:
            pass
        elif times != self._time_on_disk or sync or self._time_cut or not self._files_made:
            fd = os.open(self.time_index_path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                on_disk = min(self._time_on_disk, times)
                if self._time_cut:
                    os.ftruncate(fd, on_disk * TIME_ENTRY_SIZE)
                if times > on_disk:
                    _pwrite_all(fd, self._time_index.to_bytes()[on_disk * TIME_ENTRY_SIZE:], on_disk * TIME_ENTRY_SIZE)
                if sync:
                    os.fsync(fd)
            except OSError as e:
                raise OSError(e.errno, e.strerror, str(self.time_index_path)) from e
            finally:
                os.close(fd)
            self._time_on_disk = times
            self._time_cut = False
        self._files_made = True

    def _omit_files(self, closing: bool) -> bool:
        """No index file need be made (the segment has none yet): it holds no bytes and no entries
        (missing files are empty ones), or it is closing with nothing a scan of the log cannot say."""
        keys = len(self._keys)
        times = len(self._time_index)
        if not (self.size or keys or times):
            return True
        return closing and keys == 0 and times <= 1

    @property
    def files_made(self) -> bool:
        """Its index files exist (a new segment's are made by its first write_indexes that has
        something to write, or by make_files)."""
        return self._files_made

    @property
    def closed(self) -> bool:
        return self._closed

    def make_files(self) -> None:
        """Creates its index files, empty, where missing, so that its first write_indexes (at a
        shutdown, for 10,000 new partitions) has entries to write and no file to create. Touches
        nothing in memory: a worker thread may call it while the loop appends; the loop then calls
        `files_were_made`. A segment closed meanwhile (deleted, or its log) gets none; one whose
        files retention renamed `.deleted` meanwhile gets an orphan pair the next open removes."""
        with _MAKING_FILES:
            if self._closed:
                return
            for path in (self.index_path, self.time_index_path):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))

    def files_were_made(self) -> None:
        self._files_made = True

    def _sync_deferred(self, sync: bool) -> None:
        """fsync (if `sync`) the files of the indexes still deferred, as a loaded, unchanged index's
        write would; nothing is read or written."""
        if not sync:
            return
        for lazy, path in ((self._index_lazy, self.index_path), (self._time_lazy, self.time_index_path)):
            if lazy:
                try:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                except OSError as e:
                    raise OSError(e.errno, e.strerror, str(path)) from e

    # ---- loading and recovery --------------------------------------------------------

    def load_index(self) -> bool:
        """Read the index file; False if it is missing, torn or inconsistent with the log."""
        if not self.index_existed:
            return False
        raw = _read_file(self._sibling(".index"))
        if raw is None or len(raw) % 8:
            return False
        pairs = _u32_array()
        pairs.frombytes(raw)
        if _LITTLE:
            pairs.byteswap()
        keys, positions = pairs[0::2], pairs[1::2]
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or positions[i] <= positions[i - 1]:
                return False
        if positions:
            last_pos = positions[-1]
            if last_pos == 0 or last_pos + HEADER_SIZE > self.size:
                return False
            # Positions cannot be checked without a scan, but the last one must at least land on
            # an entry holding offsets at or above its key.
            offset, size = HEADER.unpack(os.pread(self.fd, HEADER_SIZE, last_pos))
            if offset < self.base_offset + keys[-1] or size < MIN_MESSAGE_SIZE \
                    or last_pos + HEADER_SIZE + size > self.size:
                return False
            self._bytes_since_index = self.size - last_pos
        else:
            self._bytes_since_index = self.size
        self._keys, self._positions = keys, positions
        self._index_on_disk = len(keys)
        return True

    def load_time_index(self) -> bool:
        """Read the time index file; False if it is missing or corrupt (the segment must be recovered).

        The largest timestamp is taken from its last entry, as Kafka does: a segment that was
        rolled or closed cleanly got its final entry then.
        """
        if not self.time_index_existed:
            return False
        raw = _read_file(self._sibling(".timeindex"))
        index = None if raw is None else TimeIndex.parse(self.base_offset, raw)
        if index is None:
            return False
        self._time_index = index
        self._time_on_disk = len(index)
        last = index.last_entry
        self._timestamps = TimestampTracker(last.timestamp, last.offset if len(index) else -1)
        return True

    def next_offset_from_index(self) -> int:
        """Next offset after this segment's last entry, trusting the index (clean shutdown)."""
        key, pos = self.lookup(self.base_offset + U32_MAX)
        _, _, next_offset = self.find(1 << 63, pos, self.size, key)
        return next_offset

    def recover(self, cut: bool = True, epochs: list[tuple[int, int]] | None = None) -> tuple[int, int]:
        """Validate every entry, rebuild the index and cut the log at the first bad entry.

        Returns (bytes truncated, next offset). `epochs` gets (epoch, base offset) of each run of
        one leader epoch's valid batches, in order. Reads the whole segment, in chunks; this is the
        unclean-shutdown path only (and, with `cut` False, a deferred index found bad: the
        indexes are rebuilt, the log is left whole and 0 returned).
        """
        self._index_lazy = self._time_lazy = False  # replaced whole below
        fd, base, interval = self.fd, self.base_offset, self.index_interval
        file_size = os.fstat(fd).st_size
        keys, positions = _u32_array(), _u32_array()
        tindex, tracker = TimeIndex(base), TimestampTracker()
        pos = 0
        next_offset = base
        since = 0
        buf = b""
        buf_start = 0
        # What the log's open hands the leader-epoch file, which takes the epochs newer than its own
        # (Kafka's LogSegment.recover assigns them to the cache).
        if epochs is None:
            epochs = []
        last_epoch = -1
        while pos + HEADER_SIZE <= file_size:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(RECOVER_CHUNK, file_size - pos), pos)
                buf_start, rel = pos, 0
            offset, size = HEADER.unpack_from(buf, rel)
            entry_size = HEADER_SIZE + size
            if (size < MIN_MESSAGE_SIZE or pos + entry_size > file_size or offset < next_offset
                    or offset - base > U32_MAX):
                break
            if rel + entry_size > len(buf):
                buf = os.pread(fd, min(max(RECOVER_CHUNK, entry_size), file_size - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < entry_size:
                    break
            if buf[rel + MAGIC_OFFSET] == _BATCH_MAGIC:
                # RecordBatch v2: CRC32C over attributes..end, last offset from the header.
                (crc,) = _V2_CRC.unpack_from(buf, rel + _V2_CRC_AT)
                (delta,) = _V2_LAST_DELTA.unpack_from(buf, rel + _V2_LAST_DELTA_AT)
                if (size < MIN_BATCH_SIZE or delta < 0 or offset + delta - base > U32_MAX
                        or crc32c.crc32c(memoryview(buf)[rel + RECORD_BATCH_CRC_FROM:rel + entry_size]) != crc):
                    break
                last = offset + delta
                (epoch,) = _V2_EPOCH.unpack_from(buf, rel + _V2_EPOCH_AT)
                if epoch != last_epoch and epoch >= 0:
                    epochs.append((epoch, offset))
                    last_epoch = epoch
            else:
                (crc,) = _CRC.unpack_from(buf, rel + HEADER_SIZE)
                start = rel + HEADER_SIZE + 4
                if buf[start] > 1 or crc32(memoryview(buf)[start:rel + entry_size]) != crc:
                    break
                last = offset
            _, ts, ts_offset, _ = time_head(buf, rel)
            tracker.observe(ts, ts_offset)
            if since > interval:
                keys.append(next_offset - base)
                positions.append(pos)
                tindex.maybe_append(tracker.max_timestamp, tracker.offset_of_max)
                since = 0
            since += entry_size
            next_offset = last + 1
            pos += entry_size
        if not cut:
            self._keys, self._positions = keys, positions
            self._bytes_since_index = since + (file_size - pos)
            tindex.maybe_append(tracker.max_timestamp, tracker.offset_of_max)
            self._time_index, self._timestamps = tindex, tracker
            self._index_on_disk = self._time_on_disk = 0
            self._index_cut = self._time_cut = True
            return 0, next_offset
        truncated = file_size - pos
        if truncated:
            os.ftruncate(fd, pos)
        self.size = pos
        self._tail_key = self._tail_pos = -1
        self._keys, self._positions = keys, positions
        self._bytes_since_index = since
        # As Kafka's recover: the largest timestamp goes in as a final entry.
        tindex.maybe_append(tracker.max_timestamp, tracker.offset_of_max)
        self._time_index, self._timestamps = tindex, tracker
        # Both files are rewritten whole by the next `write_indexes`, which is the caller's: the
        # log writes a recovered inactive segment's at once and leaves the active segment's to its
        # roll, flush or close (never trusted before: after a kill it is recovered again). Two
        # rewrites per partition were 41% of a kill -9 restart of 10,000 partitions (py-spy).
        self._index_on_disk = self._time_on_disk = 0
        self._index_cut = self._time_cut = True
        return truncated, next_offset

    # ---- append ----------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, first_key: int, cache_window: int = -1) -> int:
        """Append whole entries; `first_key` is the log end offset before them. Returns the position.
        `cache_window`: the page cache kept behind the end (`follow_cache`).

        All or nothing: the in-memory size and indexes move only once the entries are written.
        On an OSError (ENOSPC, EIO) the file is cut back to its size before the call and the
        error is raised; if cutting back fails too, `RollbackFailed` is raised (the file may
        hold a torn tail, which only recovery may cut). A failed append that left bytes behind
        would make the next one land after them: the same offsets twice in the file, and
        recovery would stop at the first of them and drop everything acknowledged after it.
        The index points are kept in memory; `write_indexes` puts them on disk (roll, flush,
        close), so an append makes one write.
        """
        if self._index_lazy or self._time_lazy:
            self._need_index()
            self._need_time()
        f = self._file
        fd = f.fd if f is not None else self.fd
        # The time index's one hook: the largest timestamp of what is appended, from the heads.
        # Its entry is made before anything is written, so a broken invariant (ValueError) cannot
        # leave log bytes behind that the in-memory size does not know of.
        pos, n, key, index_point, before = self._observe(data, first_key)
        tracker = self._timestamps
        try:
            time_entry = (self._time_index.maybe_append(tracker.max_timestamp, tracker.offset_of_max)
                          if index_point else None)
        except ValueError:
            tracker.max_timestamp, tracker.offset_of_max = before
            raise
        try:
            _write_all(fd, data)
        except OSError as e:
            # Named after the file whose write failed, for the operator's log line.
            named = OSError(e.errno, e.strerror, str(self.log_path))
            tracker.max_timestamp, tracker.offset_of_max = before
            if time_entry is not None:
                self._time_index.drop_last()
            try:
                os.ftruncate(fd, pos)
            except OSError as cut:
                raise RollbackFailed(named, cut) from e
            raise named from e
        self._grown(pos, n, key, index_point)
        if cache_window >= 0:
            self.follow_cache(fd, pos + n, cache_window)
        return pos

    def write_target(self) -> tuple[OpenFile, int]:
        """(open file, position) where the next append's bytes go, for the log's writer thread
        (broker.log.writer): the caller tracks positions of appends still in flight itself."""
        if self._index_lazy or self._time_lazy:
            self._need_index()
            self._need_time()
        return self.handle(), self.size

    def follow_cache(self, fd: int, end: int, window: int, broker_id: int | None = None) -> None:
        """After an append made the file end at `end`: keep its page cache to `window` behind
        the end (broker.log.page_cache; -1: the kernel decides). Called by whoever wrote."""
        if window < 0:
            return
        cache = self.tail_cache
        if cache is None:
            cache = self.tail_cache = TailCache()
        cache.follow(fd, end, window, self.log_path, broker_id)

    def written(self, data: bytes | bytearray | memoryview, first_key: int) -> None:
        """An append's bytes are in the file at `self.size` (written by the writer thread, in
        order): the size, the index point and the time index move as `append` moves them."""
        pos, n, key, index_point, before = self._observe(data, first_key)
        tracker = self._timestamps
        if index_point:
            try:
                self._time_index.maybe_append(tracker.max_timestamp, tracker.offset_of_max)
            except ValueError as e:
                # A broken invariant found after the bytes are in: the offset index and size
                # still move (the bytes are there); only this time point is left out.
                tracker.max_timestamp, tracker.offset_of_max = before
                log.error("segment.time_index_refused", segment=str(self.log_path), error=str(e))
        self._grown(pos, n, key, index_point)

    def _observe(self, data: bytes | bytearray | memoryview,
                 first_key: int) -> tuple[int, int, int, bool, tuple[int, int]]:
        """What an append of `data` at the end means: its position, size, first relative offset,
        whether it takes an index point, and the timestamp tracker's state before it (it has
        observed `data`'s largest timestamp on return: the caller puts it back on a failure)."""
        ts, ts_offset = max_timestamp(data)
        tracker = self._timestamps
        before = tracker.max_timestamp, tracker.offset_of_max
        tracker.observe(ts, ts_offset)
        return (self.size, len(data), first_key - self.base_offset,
                self._bytes_since_index > self.index_interval, before)

    def _grown(self, pos: int, n: int, key: int, index_point: bool) -> None:
        self.size = pos + n
        self._tail_key, self._tail_pos = key, pos
        if not self._files_made and (pos == 0 or index_point) and self._pending is not None:
            # Its first bytes: files to make (again, if a pass took it already); or the first index
            # point of a segment whose files a clean close left out (files_omitted): its close
            # can no longer leave them out, so the pass makes them ahead of it.
            self._pending.add(self)
        if index_point:
            # Kafka's LogSegment.append: at most one index point per append, at its first entry,
            # once more than index_interval bytes were appended since the last point. Walking
            # every entry header instead cost a fifth of a follower's CPU; a read scans at most
            # one append.
            self._keys.append(key)
            self._positions.append(pos)
            self._bytes_since_index = 0
        self._bytes_since_index += n

    # ---- lookup ----------------------------------------------------------------------

    def lookup(self, offset: int) -> tuple[int, int]:
        """(key, position) of the last index point whose key is <= offset, else (base, 0)."""
        if self._index_lazy:
            self._need_index()
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._positions[i]

    def lookup_near(self, offset: int) -> tuple[int, int]:
        """`lookup`, or the latest append's first entry when that starts later and not beyond
        `offset`: a starting point for `find` just as good as an index point, and a reader at the
        tail (a follower, a consumer caught up) then scans one append's entry headers rather than
        every one since the last index point (up to index.interval.bytes of small batches)."""
        key, pos = self.lookup(offset)
        tail_pos = self._tail_pos
        if tail_pos > pos and self.base_offset + self._tail_key <= offset:
            return self.base_offset + self._tail_key, tail_pos
        return key, pos

    def find(self, target: int, pos: int, limit: int, key: int) -> tuple[int, int, int]:
        """Scan entry headers from `pos` for the first entry whose last offset is >= target.

        Returns (position, entry size, next offset before it), with position = limit and size 0
        when no entry starting before `limit` qualifies. `key` is the next offset before `pos`.
        Only headers are read (a batch's last offset from its lastOffsetDelta); bodies are skipped.
        """
        fd = self.fd
        buf = b""
        buf_start = pos
        while pos + HEADER_SIZE <= limit:
            rel = pos - buf_start
            if rel + _PEEK > len(buf) and buf_start + len(buf) < limit:
                buf = os.pread(fd, min(READ_CHUNK, limit - pos), pos)
                buf_start, rel = pos, 0
            if rel + HEADER_SIZE > len(buf):
                break
            offset, size = HEADER.unpack_from(buf, rel)
            if rel + _PEEK <= len(buf) and buf[rel + MAGIC_OFFSET] == _BATCH_MAGIC:
                offset += _V2_LAST_DELTA.unpack_from(buf, rel + _V2_LAST_DELTA_AT)[0]
            if offset >= target:
                return pos, HEADER_SIZE + size, key
            if size < 0:  # only a corrupted file gets here; stop rather than loop backwards
                break
            key = offset + 1
            pos += HEADER_SIZE + size
        return limit, 0, key

    def whole_entries_end(self, pos: int, limit: int) -> int:
        """The end of the last whole entry from `pos` (an entry's start) that ends by `limit`;
        `pos` itself when the entry there does not fit. Only headers are read."""
        fd = self.fd
        buf = b""
        buf_start = pos
        while pos + HEADER_SIZE <= limit:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(READ_CHUNK, limit - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    break
            size = HEADER.unpack_from(buf, rel)[1]
            end = pos + HEADER_SIZE + size
            if size < 0 or end > limit:  # cut short by the limit (or a corrupted size: stop there)
                break
            pos = end
        return pos

    # ---- timestamps ------------------------------------------------------------------

    @property
    def last_modified_ms(self) -> int:
        f = self._file  # a stat by name costs no descriptor when the segment has given its back
        st = os.fstat(f.fd) if f is not None else os.stat(self.log_path)
        return st.st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """Kafka's LogSegment.largestTimestamp: the largest record timestamp, else the log file's
        last-modified time (ms) when no record carries one."""
        if self.timestamps.max_timestamp >= 0:
            return self.timestamps.max_timestamp
        return self.last_modified_ms

    def append_final_time_entry(self) -> None:
        """Offer the largest timestamp to the time index once more (Kafka does it when the segment
        stops being the active one and on close), so its last entry holds the segment's maximum.
        In memory; `write_indexes` writes it. A time index still deferred saw no append since it
        was written, so its last entry already holds the maximum: nothing to offer."""
        if self._time_lazy:
            return
        self.time_index.maybe_append(self.timestamps.max_timestamp, self.timestamps.offset_of_max)

    def find_offset_by_timestamp(self, target: int, starting_offset: int) -> tuple[int, int, int] | None:
        """(timestamp, offset, leader epoch) of the first record at or after `starting_offset` whose
        timestamp is >= target (Kafka's LogSegment.findOffsetByTimestamp); None if none is here.

        The time index gives the last point whose timestamp is <= target; every record before its
        offset is older than target, so the scan starts at the offset-index point below it and
        opens only entries whose largest timestamp reaches target.
        """
        point = self.time_index.lookup(target)
        _, pos = self.lookup(max(point.offset, starting_offset))
        for at, size, ts, _, _ in self._heads(pos, self.size):
            if ts >= target:
                found = first_at_or_after(os.pread(self.fd, size, at), target, starting_offset)
                if found is not None:
                    return found
        return None

    def _heads(self, pos: int, limit: int) -> Iterator[tuple[int, int, int, int, int]]:
        """(position, size, largest timestamp, last offset, leader epoch) of each whole entry from pos."""
        buf = b""
        buf_start = pos
        while pos + HEADER_SIZE <= limit:
            rel = pos - buf_start
            if rel + TIME_HEAD_SIZE > len(buf) and buf_start + len(buf) < limit:
                buf = os.pread(self.fd, min(READ_CHUNK, limit - pos), pos)
                buf_start, rel = pos, 0
            if rel + HEADER_SIZE > len(buf):
                return
            size, ts, last, epoch = time_head(buf, rel) if rel + TIME_HEAD_SIZE <= len(buf) \
                else time_head(buf[rel:] + bytes(TIME_HEAD_SIZE), 0)
            if size < HEADER_SIZE + MIN_MESSAGE_SIZE or pos + size > limit:
                return  # a torn or corrupt tail: recovery's business
            yield pos, size, ts, last, epoch
            pos += size

    def _reload_largest_timestamp(self) -> None:
        """After truncation: the last time index entry, then any larger timestamp after it
        (Kafka's LogSegment.loadLargestTimestamp)."""
        last = self.time_index.last_entry
        tracker = TimestampTracker(last.timestamp, last.offset if len(self.time_index) else -1)
        _, pos = self.lookup(last.offset)
        for _, _, ts, offset, _ in self._heads(pos, self.size):
            tracker.observe(ts, offset)
        self._timestamps = tracker

    # ---- truncation and lifetime -----------------------------------------------------

    def truncate_to_position(self, pos: int) -> None:
        if pos >= self.size:
            return
        self._need_index()
        os.ftruncate(self.fd, pos)
        self.size = pos
        if self._tail_pos >= pos:
            self._tail_key = self._tail_pos = -1
        keep = bisect_right(self._positions, pos - 1)
        if keep < len(self._positions):
            del self._keys[keep:]
            del self._positions[keep:]
            self._index_on_disk = min(self._index_on_disk, keep)  # the file is cut at the next write
            self._index_cut = True
        self._bytes_since_index = pos - (self._positions[-1] if self._positions else 0)

    def truncate_time_index(self, next_offset: int) -> None:
        """Drop time index entries at or above `next_offset` (the log end after a truncation)."""
        kept = self.time_index.truncate_to(next_offset)
        self._time_on_disk = min(self._time_on_disk, kept)  # the file is cut at the next write
        self._time_cut = True
        if self.timestamps.max_timestamp >= 0:
            self._reload_largest_timestamp()

    def flush(self, closing: bool = False) -> None:
        """fsync the log file and write and fsync both indexes (`closing`: see write_indexes)."""
        os.fsync(self.fd)
        self.write_indexes(sync=True, closing=closing)

    def close(self) -> None:
        """Give the descriptor back (a slice still holding it keeps it until it is done)."""
        with _MAKING_FILES:  # a make_files under way ends first; none starts after
            self._closed = True
        self._file = None
        self._pool.busy(self)

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.time_index_path):
            path.unlink(missing_ok=True)

    @property
    def index_entries(self) -> list[tuple[int, int]]:
        """Absolute (key, position) pairs, for tests and tools."""
        self._need_index()
        return [(self.base_offset + k, p) for k, p in zip(self._keys, self._positions, strict=True)]

    def __repr__(self) -> str:
        index = "deferred" if self._index_lazy else len(self._keys)
        return f"Segment(base={self.base_offset}, size={self.size}, index={index})"


def _read_file(path: str | Path) -> bytes | None:
    """A whole (index) file; None if it is missing or shrank under the read."""
    try:
        return read_small(path)
    except FileNotFoundError:
        return None


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
