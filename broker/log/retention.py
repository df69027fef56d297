"""Retention and time-roll rules: which segments a log may delete, and when a segment rolls on time.

Pure (no I/O): given each segment's base offset, size and largest timestamp, the log's end
offset, high watermark and start offset, a policy and a clock, `plan_deletion` says how many of
the oldest segments go and why. Kafka 2.8's Log.deleteOldSegments, in its order:

- with `cleanup.policy` including `delete`: time (`now - largestTimestamp > retention.ms`, each
  segment's largest record timestamp, else its file's last-modified time), then size (the log
  is over `retention.bytes` by `diff`; the oldest segments go while the next one still fits in
  `diff`), then log-start breach (a segment whose successor starts at or below the log start);
- without `delete` (`compact` alone): only the log-start breach.

Each pass deletes a prefix: it walks from the oldest segment and stops at the first that does
not match, or whose successor's base offset is above the high watermark (the log start never
passes the high watermark, so a consumer can never be moved past committed data it has not
been offered).

Departure from Kafka: Kafka deletes the active segment too when everything has expired (it rolls
a new empty one first); here, as issue 17 asks, the active (last) segment is never deleted.

`should_roll_on_time` is Kafka's LogSegment.shouldRoll time rule (segment.ms): a non-empty
segment rolls when the batch being appended is more than `segment.ms` newer than the segment's
first batch (its max timestamp), or, when that batch carries no timestamp, when the segment was
created more than `segment.ms` ago. `segment.jitter.ms` is not served (Kafka's default is 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What retention applies to one log: -1 means unlimited (Kafka's retention.ms / retention.bytes)."""

    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    delete: bool = True  # cleanup.policy includes delete


@dataclass(frozen=True, slots=True)
class SegmentStat:
    base_offset: int
    size: int
    largest_timestamp: int  # largest record timestamp, else the file's last-modified time (ms)


@dataclass(frozen=True, slots=True)
class Deletion:
    """The oldest `count` segments go; `reasons` lists (reason, segments) per pass that found any."""

    count: int
    reasons: tuple[tuple[str, int], ...] = ()


def plan_deletion(segments: Sequence[SegmentStat], high_watermark: int, log_start_offset: int,
                  policy: RetentionPolicy, clock: Callable[[], int]) -> Deletion:
    """How many of the oldest `segments` (oldest first, the last being the active one) to delete."""
    now_ms = clock()
    done = 0
    reasons: list[tuple[str, int]] = []

    def run(reason: str, predicate: Callable[[int], bool]) -> None:
        nonlocal done
        n = 0
        # Never the active segment; never a segment whose successor starts above the high watermark.
        while done + n < len(segments) - 1:
            i = done + n
            if segments[i + 1].base_offset > high_watermark or not predicate(i):
                break
            n += 1
        if n:
            done += n
            reasons.append((reason, n))

    if policy.delete:
        if policy.retention_ms >= 0:
            run("retention_ms", lambda i: now_ms - segments[i].largest_timestamp > policy.retention_ms)
        size = sum(s.size for s in segments[done:])
        if policy.retention_bytes >= 0 and size >= policy.retention_bytes:
            diff = size - policy.retention_bytes

            def over_size(i: int) -> bool:
                nonlocal diff
                if diff - segments[i].size >= 0:
                    diff -= segments[i].size
                    return True
                return False

            run("retention_bytes", over_size)
    run("log_start_offset", lambda i: segments[i + 1].base_offset <= log_start_offset)
    return Deletion(done, tuple(reasons))


def should_roll_on_time(segment_size: int, segment_ms: int, first_batch_timestamp: int | None,
                        created_ms: int, incoming_max_timestamp: int, clock: Callable[[], int]) -> bool:
    """Kafka's time condition of LogSegment.shouldRoll (see the module docstring)."""
    if segment_size <= 0:
        return False
    if first_batch_timestamp is not None and first_batch_timestamp >= 0:
        waited = incoming_max_timestamp - first_batch_timestamp
    else:
        waited = clock() - created_ms
    return waited > segment_ms
