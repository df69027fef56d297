"""A segment's time index: Kafka's `.timeindex` rules and file format, without I/O.

An entry is `timestamp i64, relative offset i32`, big-endian, 12 bytes
(protocol.layouts.TimeIndexEntry; Kafka's kafka.log.TimeIndex). It says "every message up to
`offset` has a timestamp <= `timestamp`", which makes a lookup's start point safe: the first
message with a timestamp >= T cannot come before the entry found for T.

The rules are Kafka's LogSegment/TimeIndex ones:
- the segment tracks the largest timestamp seen so far and the (shallow) offset of the entry or
  batch that carried it (`TimestampTracker`);
- at each offset-index point (more than `index.interval.bytes` appended since the last one) the
  tracker's (max timestamp, its offset) is offered to the index, which keeps it only when the
  timestamp is larger than its last entry's: timestamps strictly increase, offsets never
  decrease, and a log of magic-0 messages (no timestamps) leaves the index empty;
- when a segment stops being the active one, and when the log closes, the tracker's final value
  is offered once more, so the last entry of a closed segment holds its largest timestamp;
- truncation drops the entries at or above the new end offset.

Departure: the file grows by appends instead of being a preallocated mmap (as the offset index
of this project), so there is no "full" state and nothing to trim.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from protocol.layouts import TimeIndexEntry, fixed, size_of

ENTRY = fixed(TimeIndexEntry)  # timestamp i64, relative offset i32
ENTRY_SIZE = size_of(TimeIndexEntry)  # 12
NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP
_I32_MAX = (1 << 31) - 1
_LITTLE = sys.byteorder == "little"


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


class TimestampTracker:
    """The largest timestamp a segment holds and the shallow offset that carries it."""

    __slots__ = ("max_timestamp", "offset_of_max")

    def __init__(self, max_timestamp: int = NO_TIMESTAMP, offset_of_max: int = -1) -> None:
        self.max_timestamp = max_timestamp
        self.offset_of_max = offset_of_max

    def observe(self, timestamp: int, offset: int) -> None:
        if timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max = timestamp, offset


class TimeIndex:
    """The entries of one segment's time index, in memory; the caller writes `maybe_append`'s bytes."""

    __slots__ = ("base_offset", "_timestamps", "_offsets")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._timestamps = array("q")
        self._offsets = array("q")  # absolute, for bisecting on truncation

    # ---- reading a file --------------------------------------------------------------

    @classmethod
    def parse(cls, base_offset: int, raw: bytes) -> TimeIndex | None:
        """The index stored in `raw`, or None when it is corrupt (Kafka's sanity check, and more).

        Corrupt: a size that is not a whole number of entries, an offset below the base, offsets
        that go backwards or timestamps that do not strictly increase.
        """
        if len(raw) % ENTRY_SIZE:
            return None
        index = cls(base_offset)
        prev_ts: int | None = None
        prev_rel = 0
        for ts, rel in ENTRY.iter_unpack(raw):
            if rel < prev_rel or (prev_ts is not None and ts <= prev_ts):
                return None
            index._timestamps.append(ts)
            index._offsets.append(base_offset + rel)
            prev_ts, prev_rel = ts, rel
        return index

    # ---- state -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry; (NO_TIMESTAMP, base offset) when empty, as Kafka's lastEntry."""
        if not self._timestamps:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._timestamps[-1], self._offsets[-1])

    @property
    def entries(self) -> list[TimestampOffset]:
        return [TimestampOffset(t, o) for t, o in zip(self._timestamps, self._offsets, strict=True)]

    # ---- the rules -------------------------------------------------------------------

    def maybe_append(self, timestamp: int, offset: int) -> bytes | None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's; the entry's
        bytes to write, or None when nothing was added.

        An offset below the last entry's, or a timestamp below it, is a caller's bug (Kafka
        raises too); an equal timestamp is the repeat a roll or close offers, and is ignored.
        """
        last = self.last_entry
        if self._timestamps and offset < last.offset:
            raise ValueError(f"time index offset {offset} is below the last entry's {last.offset}")
        if self._timestamps and timestamp < last.timestamp:
            raise ValueError(f"time index timestamp {timestamp} is below the last entry's {last.timestamp}")
        if timestamp <= last.timestamp:
            return None
        rel = offset - self.base_offset
        if not 0 <= rel <= _I32_MAX:
            raise ValueError(f"offset {offset} is not within a segment based at {self.base_offset}")
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        return ENTRY.pack(timestamp, rel)

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The last entry whose timestamp is <= `timestamp`; (NO_TIMESTAMP, base) if none is."""
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._timestamps[i], self._offsets[i])

    def truncate_to(self, offset: int) -> int:
        """Drop every entry whose offset is >= `offset`; returns the entries kept (file size / 12)."""
        keep = bisect_left(self._offsets, offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]
        return keep

    def drop_last(self) -> None:
        """Forget the last entry (its write failed)."""
        del self._timestamps[-1:]
        del self._offsets[-1:]

    def to_bytes(self) -> bytes:
        return b"".join(ENTRY.pack(t, o - self.base_offset)
                        for t, o in zip(self._timestamps, self._offsets, strict=True))


# ---- ListOffsets v0 ------------------------------------------------------------------------------

LATEST = -1  # ListOffsetsRequest.LATEST_TIMESTAMP
EARLIEST = -2  # ListOffsetsRequest.EARLIEST_TIMESTAMP


def legacy_offsets(points: list[tuple[int, int]], timestamp: int, max_num_offsets: int) -> list[int]:
    """Kafka's Log.legacyFetchOffsetsBefore over (offset, time ms) points: each segment's base
    offset with its last-modified time, then (log end offset, now) if the last segment holds data.

    LATEST starts from the last point, EARLIEST from the first, a timestamp from the last point
    whose time is <= it; up to max_num_offsets offsets from there backwards, largest first.
    """
    if timestamp == LATEST:
        start = len(points) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(points) - 1
        while start >= 0 and points[start][1] > timestamp:
            start -= 1
    count = max(0, min(max_num_offsets, start + 1))
    return sorted((points[start - j][0] for j in range(count)), reverse=True)
