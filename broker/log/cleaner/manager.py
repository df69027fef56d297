"""The cleaner's tasks (Kafka's LogCleaner threads and LogCleanerManager's bookkeeping).

`log.cleaner.threads` asyncio tasks share one event loop with the broker; each repeatedly takes
the filthiest eligible compacted log that no other task holds (rules.filthiest), cleans it
(cleaner.clean_log, in throttled steps) and records its new first dirty offset in the
`cleaner-offset-checkpoint`; when no log is eligible it sleeps `log.cleaner.backoff.ms`. Replaced
segments are closed and their `.deleted` files removed the topic's `file.delete.delay.ms` later.

What the cleaner is told of the broker's logs comes from a callable (`CleanerLog` rows), so this
package knows nothing of partitions, replication or ZooKeeper; broker.log_cleaning wires it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.log.cleaner import checkpoint
from broker.log.cleaner.batches import OffsetMap
from broker.log.cleaner.cleaner import CleanerStats, CleaningAborted, clean_log, segment_stats
from broker.log.cleaner.rules import (
    Cleanable,
    CompactionConfig,
    cleanable_offsets,
    filthiest,
    offset_map_capacity,
)
from broker.log.cleaner.throttle import CleanerThrottle
from broker.log.errors import KafkaStorageError
from broker.log.log import Log
from broker.log.segment import Segment

log = structlog.get_logger()


@dataclass(frozen=True)
class CleanerSettings:
    """The broker's log.cleaner.* keys (Kafka 2.8 names and defaults live in broker.config)."""

    enable: bool = True
    threads: int = 1
    io_max_bytes_per_second: float = 1.7976931348623157e308
    dedupe_buffer_size: int = 128 * 1024 * 1024
    backoff_ms: int = 15000


@dataclass(frozen=True)
class CleanerLog:
    """One hosted log as the cleaner sees it."""

    topic: str
    partition: int
    log: Log
    high_watermark: int
    config: CompactionConfig
    producer_last_offsets: Callable[[], Container[tuple[int, int]]]

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class LogCleaner:
    def __init__(self, settings: CleanerSettings, log_dir: Path,
                 logs: Callable[[], Awaitable[list[CleanerLog]]],
                 on_read: Callable[[int], None] = lambda n: None,
                 on_written: Callable[[int], None] = lambda n: None,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.logs = logs
        self.on_read = on_read
        self.on_written = on_written
        self.wall_ms = wall_ms
        self.throttle = CleanerThrottle(settings.io_max_bytes_per_second, clock_ms)
        self.checkpoints = checkpoint.read(log_dir)
        self.in_progress: set[tuple[str, int]] = set()
        self.max_dirty_ratio = 0.0
        self.passes = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._retired: list[tuple[asyncio.TimerHandle, Log, list[Segment]]] = []
        self._wake = asyncio.Event()
        self._checkpoint_lock = asyncio.Lock()

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        if not self.settings.enable:
            return
        for i in range(self.settings.threads):
            self._tasks.append(asyncio.create_task(self._run(i), name=f"log-cleaner-{i}"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for handle, log_, segs in self._retired:
            handle.cancel()
            log_.finish_delete(segs)
        self._retired.clear()

    def wake(self) -> None:
        """Look for work now rather than after the back-off (a config change, a test)."""
        self._wake.set()

    # ---- one task --------------------------------------------------------------------

    async def _run(self, worker: int) -> None:
        capacity = offset_map_capacity(self.settings.dedupe_buffer_size, self.settings.threads)
        offset_map = OffsetMap(capacity)
        while True:
            try:
                cleaned = await self._clean_filthiest(offset_map)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # one log's failure must not stop the cleaner (Kafka logs and goes on)
                log.error("cleaner.failed", worker=worker, error=repr(e))
                cleaned = False
            offset_map.clear()
            if not cleaned:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self.settings.backoff_ms / 1000)
                except TimeoutError:
                    pass
            else:
                await asyncio.sleep(0)

    def _pick(self, rows: list[CleanerLog]) -> tuple[CleanerLog, Cleanable] | None:
        now = self.wall_ms()
        candidates: list[tuple[CleanerLog, Cleanable]] = []
        top = 0.0
        for row in rows:
            if not row.config.compact or row.log.failed is not None:
                continue
            try:
                c = cleanable_offsets(segment_stats(row.log), row.log.log_start_offset, row.log.log_end_offset,
                                      row.high_watermark, self.checkpoints.get(row.key), now, row.config)
            except (OSError, ValueError):
                continue  # closed or failing under us; the replica manager handles the failure
            top = max(top, c.ratio)
            if row.key not in self.in_progress:
                candidates.append((row, c))
        self.max_dirty_ratio = top
        best = filthiest([(c, row.config) for row, c in candidates])
        return None if best is None else candidates[best]

    async def _clean_filthiest(self, offset_map: OffsetMap) -> bool:
        rows = await self.logs()
        # A log no longer hosted here (deleted, moved away) loses its row: if it comes back, it is
        # dirty from its start again, which costs a pass and can never keep a duplicate forever.
        hosted = {row.key for row in rows}
        for key in [k for k in self.checkpoints if k not in hosted]:
            del self.checkpoints[key]
        picked = self._pick(rows)
        if picked is None:
            return False
        row, cleanable = picked
        self.in_progress.add(row.key)
        stats = CleanerStats(on_read=self.on_read, on_written=self.on_written)
        started = time.monotonic()
        try:
            end = await clean_log(row.log, cleanable, row.config, offset_map, row.producer_last_offsets(),
                                  self.throttle, stats,
                                  lambda segs: self._retire(row.log, segs, row.config.file_delete_delay_ms))
        except CleaningAborted as e:
            log.info("cleaner.aborted", topic=row.topic, partition=row.partition, reason=str(e))
            return False
        except KafkaStorageError as e:
            log.error("cleaner.storage_error", topic=row.topic, partition=row.partition, error=str(e))
            return False
        finally:
            self.in_progress.discard(row.key)
        self.passes += 1
        self.checkpoints[row.key] = end
        try:
            # Off the event loop (it fsyncs); one writer at a time, each writing the latest rows.
            async with self._checkpoint_lock:
                await asyncio.to_thread(checkpoint.write, self.log_dir, dict(self.checkpoints))
        except OSError as e:
            log.error("cleaner.checkpoint_failed", error=str(e))
        log.info("cleaner.cleaned", topic=row.topic, partition=row.partition, first_dirty=cleanable.first_dirty,
                 end_offset=end, dirty_ratio=round(cleanable.ratio, 3), dirty_bytes=cleanable.cleanable_bytes,
                 groups=stats.groups,
                 bytes_read=stats.bytes_read, bytes_written=stats.bytes_written, records_read=stats.records_read,
                 records_kept=stats.records_kept, seconds=round(time.monotonic() - started, 3))
        return True

    def _retire(self, log_: Log, segments: list[Segment], delay_ms: int) -> None:
        """Replaced segments are closed and unlinked file.delete.delay.ms from now (Log.finish_delete),
        as retention's are: a fetch holding a slice of one reads on meanwhile."""
        loop = asyncio.get_running_loop()
        entry: list[tuple[asyncio.TimerHandle, Log, list[Segment]]] = []

        def delete() -> None:
            log_.finish_delete(segments)
            if entry and entry[0] in self._retired:
                self._retired.remove(entry[0])

        handle = loop.call_later(delay_ms / 1000, delete)
        entry.append((handle, log_, segments))
        self._retired.append(entry[0])
