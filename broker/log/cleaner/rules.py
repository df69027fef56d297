"""The log cleaner's decisions, pure: what is cleanable, which log goes first, how segments group.

Kafka 2.8's LogCleanerManager.cleanableOffsets / calculateCleanableBytes / maxCompactionDelay /
grabFilthiestCompactedLog and Cleaner.doClean's delete horizon and groupSegmentsBySize, over
plain descriptions of segments (`SegmentStat`) and a time passed in, so they are tested on a
fake clock. broker.log.cleaner.cleaner does the I/O these decisions drive.

One departure: the cleanable range also stops at the high watermark (Kafka 2.8 stops at the
first unstable offset, which without transactions is none); a segment above it may still be
truncated by a follower, and cleaning it first would be wasted work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

LONG_MAX = (1 << 63) - 1
# Kafka's SkimpyOffsetMap holds a 16-byte MD5 and an 8-byte offset per slot and is filled to
# log.cleaner.io.buffer.load.factor (0.9). A Python dict of 16-byte digests to ints costs about
# this much per entry (digest object, int, table slot), so the map here is bounded by
# log.cleaner.dedupe.buffer.size as real memory rather than by Kafka's slot count.
OFFSET_MAP_ENTRY_BYTES = 128
LOAD_FACTOR = 0.9


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """A topic's cleaner settings (Kafka's LogConfig), with Kafka 2.8's defaults."""

    compact: bool = False  # cleanup.policy holds `compact`
    min_cleanable_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    delete_retention_ms: int = 86400000  # delete.retention.ms
    segment_bytes: int = 1 << 30  # segment.bytes: the most a cleaned group may hold
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms: how long replaced segments stay open


@dataclass(frozen=True, slots=True)
class SegmentStat:
    """What the rules need of one segment, the active one included (it is always last)."""

    base_offset: int
    size: int
    largest_timestamp: int  # Kafka's LogSegment.largestTimestamp (the file's mtime when no record has one)
    first_batch_timestamp: int  # the first batch's max timestamp, -1 when empty or unknown
    last_modified_ms: int


@dataclass(frozen=True, slots=True)
class Cleanable:
    """Kafka's LogToClean: the dirty range [first_dirty, first_uncleanable) and its sizes."""

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int
    reset_checkpoint: bool  # the checkpointed offset was out of range (Kafka's forceUpdateCheckpoint)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def ratio(self) -> float:
        """Kafka's cleanableRatio: dirty bytes over all bytes below the uncleanable point."""
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        """max.compaction.lag.ms has passed for the oldest dirty record."""
        return self.max_compaction_delay_ms > 0

    def eligible(self, config: CompactionConfig) -> bool:
        """grabFilthiestCompactedLog's filter."""
        return (self.needs_compaction_now and self.cleanable_bytes > 0) or self.ratio > config.min_cleanable_ratio


def _max_compaction_delay(dirty_inactive: Sequence[SegmentStat], now_ms: int, max_lag_ms: int) -> int:
    """LogCleanerManager.maxCompactionDelay: how far past max.compaction.lag.ms the oldest dirty batch is."""
    stamps = [s.first_batch_timestamp for s in dirty_inactive if s.first_batch_timestamp > 0]
    earliest = min(stamps) if stamps else LONG_MAX
    clean_until = now_ms - max(max_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def cleanable_offsets(segments: Sequence[SegmentStat], log_start_offset: int, log_end_offset: int,
                      high_watermark: int, checkpoint: int | None, now_ms: int,
                      config: CompactionConfig) -> Cleanable:
    """LogCleanerManager.cleanableOffsets and calculateCleanableBytes for one log.

    `segments` are in offset order, the active segment last. The dirty range starts at the
    checkpoint (reset to the log start when it lies outside the log) and ends at the first of:
    the active segment, the first dirty segment holding a record newer than
    min.compaction.lag.ms, the segment holding the high watermark (see the module docstring).
    """
    if not segments:
        raise ValueError("a log has at least its active segment")
    reset = False
    first_dirty = log_start_offset if checkpoint is None else checkpoint
    if first_dirty < log_start_offset or first_dirty > log_end_offset:
        first_dirty, reset = log_start_offset, checkpoint is not None
    active = segments[-1]
    inactive = segments[:-1]
    # Kafka's nonActiveLogSegmentsFrom(firstDirty): from the segment holding first_dirty on.
    dirty_inactive = [s for i, s in enumerate(inactive)
                      if (segments[i + 1].base_offset > first_dirty)]
    bounds = [active.base_offset, _segment_base_at(segments, high_watermark)]
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for s in dirty_inactive:
            if s.largest_timestamp > now_ms - lag:
                bounds.append(s.base_offset)
                break
    uncleanable = max(first_dirty, min(bounds))
    # calculateCleanableBytes: the uncleanable point moves down to a segment boundary.
    first_uncleanable_segment = next((s for s in inactive if _holds_or_after(segments, s, uncleanable)), active)
    first_uncleanable = first_uncleanable_segment.base_offset
    low = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(s.size for i, s in enumerate(segments)
                          if _overlaps(segments, i, low, first_uncleanable))
    clean_bytes = sum(s.size for i, s in enumerate(segments) if _overlaps(segments, i, -1, first_dirty))
    delay = _max_compaction_delay(dirty_inactive, now_ms, config.max_compaction_lag_ms)
    return Cleanable(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, delay, reset)


def _segment_base_at(segments: Sequence[SegmentStat], offset: int) -> int:
    """Base offset of the segment holding `offset` (the first segment's base when below it)."""
    base = segments[0].base_offset
    for s in segments:
        if s.base_offset <= offset:
            base = s.base_offset
        else:
            break
    return base


def _holds_or_after(segments: Sequence[SegmentStat], seg: SegmentStat, offset: int) -> bool:
    """Kafka's nonActiveLogSegmentsFrom(offset).head test: seg holds `offset` or starts after it."""
    i = segments.index(seg)
    end = segments[i + 1].base_offset if i + 1 < len(segments) else LONG_MAX
    return end > offset


def _overlaps(segments: Sequence[SegmentStat], i: int, start: int, end: int) -> bool:
    """Kafka's logSegments(from, to): segment i holds some offset in [start, end)."""
    seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else LONG_MAX
    return segments[i].base_offset < end and seg_end > start


def filthiest(candidates: Sequence[tuple[Cleanable, CompactionConfig]]) -> int | None:
    """grabFilthiestCompactedLog: the index of the eligible log with the highest dirty ratio."""
    best, best_ratio = None, -1.0
    for i, (c, cfg) in enumerate(candidates):
        if cfg.compact and c.eligible(cfg) and c.ratio > best_ratio:
            best, best_ratio = i, c.ratio
    return best


def delete_horizon_ms(segments: Sequence[SegmentStat], first_dirty: int, delete_retention_ms: int) -> int:
    """Cleaner.clean: tombstones in segments last modified at or before this may go.

    The last modified time of the last segment wholly below the first dirty offset, less
    delete.retention.ms; 0 when nothing was cleaned yet (every tombstone stays).
    """
    clean = [s for i, s in enumerate(segments) if _overlaps(segments, i, 0, first_dirty)]
    if not clean:
        return 0
    return clean[-1].last_modified_ms - delete_retention_ms


def retain_deletes(segment: SegmentStat, horizon_ms: int) -> bool:
    """Cleaner.cleanSegments' retainDeletesAndTxnMarkers for one source segment."""
    return segment.last_modified_ms > horizon_ms


def group_by_size(segments: Sequence[SegmentStat], max_size: int, end_offset: int) -> list[list[int]]:
    """Cleaner.groupSegmentsBySize: indexes of consecutive segments below `end_offset` whose sizes add
    up to at most `max_size` and whose offsets stay within a u32 of the group's base (our index's
    relative offsets; Kafka's bound is Int.MaxValue, which is below it)."""
    picked = [i for i, s in enumerate(segments) if s.base_offset < end_offset]
    groups: list[list[int]] = []
    i = 0
    while i < len(picked):
        group = [picked[i]]
        size = segments[picked[i]].size
        base = segments[picked[i]].base_offset
        i += 1
        while i < len(picked):
            nxt = segments[picked[i]]
            nxt_end = segments[picked[i] + 1].base_offset if picked[i] + 1 < len(segments) else end_offset
            if size + nxt.size > max_size or nxt_end - 1 - base > (1 << 31) - 1:
                break
            group.append(picked[i])
            size += nxt.size
            i += 1
        groups.append(group)
    return groups


def offset_map_capacity(dedupe_buffer_size: int, threads: int) -> int:
    """Keys one cleaning task may map: its share of log.cleaner.dedupe.buffer.size (Kafka splits it
    between the cleaner threads), filled to the load factor."""
    per_task = dedupe_buffer_size // max(threads, 1)
    return max(1, int(per_task // OFFSET_MAP_ENTRY_BYTES * LOAD_FACTOR))
