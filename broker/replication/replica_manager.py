"""Partitions hosted on this broker: logs, leader/follower roles, high watermarks, ISR upkeep.

Roles come from the controller's LeaderAndIsr. A leader tracks its followers' fetch
offsets (broker.replication.isr.IsrTracker), moves the high watermark to the minimum log end over
the ISR, shrinks and expands the ISR by lag time and writes each change with a
conditional set on the partition's state znode, batching the changes into
`/isr_change_notification` for the controller. A follower is handed to a replica fetcher
for its leader, which truncates it first (KIP-101/KIP-279): to the end of its latest leader
epoch as the leader knows it (`end_offset_for_epoch`), or to its high watermark when its log
holds no epochs (magic-1 data) or the leader has none for it.

Leader epochs (KIP-101): each partition keeps its epochs in `leader-epoch-checkpoint`
(broker.log.leader_epoch_checkpoint). A new leader records (its epoch, its log end offset);
every append, leader's or follower's, records the epochs stamped in its magic-2 batches; every
truncation drops the epochs above the new log end.

Storage errors (broker.replication.log_dir_failure): an I/O error on the log directory fails
it as a whole, once: its partitions go offline at once (`Partition.offline`; Produce, Fetch and
ListOffsets answer KAFKA_STORAGE_ERROR, waiting acks=all produces are answered with it), the
`on_offline` listeners stop their fetchers, no checkpoint or clean-shutdown marker is written
for it any more, and the controller is told through ZooKeeper.

Retention (issue 17): every `log.retention.check.interval.ms` each hosted log, leader's or
follower's alike (replication stays on Fetch v3, which carries no log start offset), deletes
the oldest segments broker.log.retention's rules name for its topic's LogConfig; the log start
offset moves, leader epochs below it are dropped (Kafka's truncateFromStart) and producer
snapshots below it deleted; the files go `file.delete.delay.ms` later. Log start offsets are
kept in `log-start-offset-checkpoint` (Kafka's format, one per log dir) beside the high
watermarks' file and with it.

Both purgatories (acks=all produce, long-poll fetch) wait on one keyed signal
(broker.signal.KeyedSignal, Kafka's purgatory watch lists): every append, high-watermark move,
ISR or role change of a partition wakes only the requests waiting on that partition, and a
failed log directory wakes them all.

Start-up (issue 21): `load_logs` opens every partition directory found in the log dir (Kafka's
LogManager.loadLogs), in chunks, while the broker connects, registers (after a kill -9, waits for
its old session to go) and the controller reads ZooKeeper. After a kill -9 the chunks run on worker
threads, whose recovery reads overlap all of that; after a clean shutdown an open is mostly Python
(indexes read lazily), and the chunks run on the event loop between its other work, which costs
that work no more than the opens' CPU (on threads, the two fought over the GIL: see _load_logs). The opened partitions wait in `_loaded`, outside `partitions` (no role yet:
requests for them are answered as for any partition not hosted), until LeaderAndIsr claims them in
`_open`; all the loop does then is move the object. Departure: Kafka loads before it registers;
here registering goes first and every LeaderAndIsr waits for the load (`wait_loaded`), a
StopReplica that deletes a log being loaded deletes it once the load is done, and no checkpoint is
written meanwhile (it would leave out the logs not loaded yet). Shutdown closes the logs in the
same chunks on worker threads.

Clean shutdown: one marker for the log dir, Kafka's `.kafka_cleanshutdown`, written after every
log closed without error and the file system synced, in place of a marker in each partition's
directory (10,000 file creations at shutdown and as many unlinks at start-up). At start-up it is
read and removed (the removal fsynced) before any log opens, and only the logs `load_logs` opens
are opened as clean: a crash from then on recovers them all. A partition's own `.clean_shutdown`
(written by earlier releases, and at a shutdown where some log failed to close) still counts.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import structlog

from broker.config import BrokerConfig
from broker.log import FileSlice, KafkaStorageError, Log, OffsetOutOfRange
from broker.log.dirs import InvalidPartitionName, partition_dir
from broker.log.index_files import PendingIndexFiles, make_index_files
from broker.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from broker.log.leader_epoch_checkpoint import DeferredSyncs, LeaderEpochFile
from broker.log.log import fsync_dir, make_new_log_dir, remove_new_log_dir
from broker.log.open_files import SEGMENT_FILES, is_descriptor_exhaustion, soft_nofile_limit, sync_file_system
from broker.log.producer_state import BatchMetadata, ProducerAppend, ProducerBatch, ProducerStateError
from broker.log.producers import PartitionProducers
from broker.log.retention import plan_deletion
from broker.log.segment import Segment
from broker.log.writer import FAILED, DirWriter, PendingAppend, Unwritten, WriterStopped
from broker.log_config import LogConfig, log_config
from broker.metrics import Registry
from broker.replication.isr import IsrTracker
from broker.replication.log_dir_failure import LogDirFailureChannel, notify_controller
from broker.signal import KeyedSignal
from broker.zk import layout as L
from broker.zk.client import BadVersionError, NoNodeError, ZkClient
from protocol.errors import ErrorCode
from protocol.records.errors import RecordsError
from protocol.records.records import shallow_validate
from protocol.records.validator import Validated, ValidationConfig, validate
from quotas.rate import SimpleRate

log = structlog.get_logger()
_T = TypeVar("_T")
_R = TypeVar("_R")
CHECKPOINT = "replication-offset-checkpoint"
LOG_DIR_CLEAN_SHUTDOWN = ".kafka_cleanshutdown"  # Kafka's LogManager.CleanShutdownFile
START_CHECKPOINT = "log-start-offset-checkpoint"
# Kafka 2.8's LogManager.ProducerIdExpirationCheckIntervalMs (not a config there either).
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_S = 600
# Logs closed at once at shutdown: no fsync is left in a close (one syncfs after them all), but a
# new partition's first close creates three files (both indexes, the producer snapshot), and a
# file creation costs ~0.5 ms of kernel time on this machine's ext4: 16 threads measured faster
# than 4 (SIGTERM of 10,000 new partitions, two runs each side by side at load 6-9).
_CLOSE_THREADS = 16
_NEW_DIR_THREADS = 8  # make_new_log_dirs: kernel work (mkdir, creat), the GIL released
# Logs opened at once at start-up: the work is mostly Python under the GIL, with small reads in
# between; two threads overlap the I/O (recovery's reads after a kill), more only fight over the
# GIL (10,000 opens measured 2.6 s on one thread, 3.5-3.7 s on two and four, on a loaded machine).
_LOAD_THREADS = 2
# Partitions per worker-thread job at start-up and shutdown: one future per partition cost the
# event loop more than the work (10,000 futures, wrap_future and gather, at shutdown).
_CHUNK = 64
# Partitions opened on the event loop between two yields after a clean shutdown (~3 ms of work).
_LOOP_CHUNK = 16
# How often new partitions' index files are made in the background (_index_files_loop).
_INDEX_FILES_EVERY_S = 2.0
# How long the objects made at start-up stay out of the garbage collector's passes (see load_logs).
_UNFREEZE_AFTER_S = 60.0


# What check_follower_fetch says of a follower fetch (strings: handlers may not import this layer).
FollowerFetch = Literal["ok", "out_of_range", "not_assigned"]


def _now_ms() -> float:
    return time.monotonic() * 1000


def _wall_ms() -> int:
    # Producer state ages by record timestamps (Kafka's lastTimestamp), so its clock is wall time.
    return int(time.time() * 1000)


# A leader Produce append smaller than this is written on the loop when its log has nothing in
# flight (`submit_append`). The thread hand-off (notify, thread wake, call_soon_threadsafe, loop
# wake, the answer through a future) costs tens of microseconds of latency and CPU, which only
# pays when the copy itself is long: an os.write of 64 KiB into the page cache takes ~10-20 µs, so
# below this the hand-off costs more than it lets the loop overlap; above it (batched producers'
# large requests) the copy is what the thread takes off the loop.
INLINE_APPEND_BYTES = 64 * 1024


@dataclass(slots=True)
class LeaderAppend:
    """What a leader append answers a producer: Produce's per-partition fields."""

    error_code: ErrorCode
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str]] = field(default_factory=list)
    error_message: str | None = None


@dataclass(slots=True)
class InFlightAppend:
    """An idempotent producer's append between its check and its completion (submit_append)."""

    staged: ProducerAppend  # its producer state changes, committed once it is written
    first_offset: int
    last_offset: int
    answer: asyncio.Future[LeaderAppend]
    # An earlier append of its producer on the partition failed after this one was checked against
    # it: not answered as written even if its bytes made it (never, but for a bug; see written()).
    poisoned: bool = False


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    epochs: LeaderEpochFile
    replicas: list[int] = field(default_factory=list)
    leader: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)  # the one copy; the leader's IsrTracker reads it
    zk_version: int = 0
    controller_epoch: int = 0
    high_watermark: int = 0
    min_insync_replicas: int = 1
    tracker: IsrTracker | None = None
    bytes_in: SimpleRate = field(default_factory=lambda: SimpleRate(11, 1.0))
    offline: bool = False  # its log directory failed: KAFKA_STORAGE_ERROR to every request
    producers: PartitionProducers | None = None  # idempotent producers' state, kept with the log
    # The log end when this broker last became leader (Kafka's leaderEpochStartOffsetOpt), -1 as a
    # follower: until the high watermark reaches it, "latest" is not known (OFFSET_NOT_AVAILABLE).
    leader_epoch_start_offset: int = -1
    log_config: LogConfig | None = None  # the topic's retention and roll settings (None: the broker's)
    # Idempotent producers' appends in flight (submit_append), by producer id, in start order:
    # the next batch is checked against the producer state they will leave (see _check_producer).
    producer_appends: dict[int, list[InFlightAppend]] = field(default_factory=dict)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)


def log_end_key(tp: tuple[str, int]) -> tuple[str, int, str]:
    """The key follower fetches wait on instead of the partition's own (see ReplicaManager.wake)."""
    return (tp[0], tp[1], "log end")


class ReplicaManager:
    def __init__(self, config: BrokerConfig, zk: ZkClient, metrics: Registry,
                 clock: Callable[[], float] = _now_ms, wall_clock: Callable[[], int] = _wall_ms) -> None:
        self.config = config
        self.zk = zk
        self.clock = clock
        self.wall_clock = wall_clock
        self.broker_id = config.broker_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # submit_append_now's, found at its first call
        # Opened at start-up (load_logs), not yet given a role by LeaderAndIsr (see the module docstring).
        self._loaded: dict[tuple[str, int], Partition] = {}
        self._loading: set[tuple[str, int]] = set()  # being opened by load_logs now
        self._delete_after_load: set[tuple[str, int]] = set()  # StopReplica(delete) met them loading
        # Found on disk, failed to load and not opened since: their state is unknown, so no
        # shutdown may mark the whole log dir clean while they are there.
        self._load_failed: set[tuple[str, int]] = set()
        self._load_done = asyncio.Event()
        self._load_done.set()  # nothing to wait for until load_logs starts
        self.log_dir: Path = config.log_dirs[0]
        self.dir_failures = LogDirFailureChannel()
        self._offline_listeners: list[Callable[[tuple[str, int]], None]] = []
        # Partitions the controller gave this broker whose log could not be opened (Kafka's HostedPartition.Offline).
        self._unopened_offline: set[tuple[str, int]] = set()
        # Leader-epoch checkpoint fsyncs, batched (see sync_epochs).
        self.epoch_syncs = DeferredSyncs()
        self._epoch_sync_lock = asyncio.Lock()
        self._epoch_rounds: set[asyncio.Task[None]] = set()  # sync_epochs' rounds still running
        self.descriptor_errors = 0  # calls refused for want of a descriptor (broker.log.open_files)
        # New segments still without index files, for _index_files_loop (broker.log.index_files).
        self.index_files = PendingIndexFiles()
        # Leader Produce appends' writes (broker.log.writer): one thread for the log directory,
        # started on the first append, stopped (queue drained) before the logs close.
        self.writer = DirWriter(str(self.log_dir), self.broker_id)
        # Storage errors met by stop() itself (the checkpoints, a log's close, the syncs, the
        # markers): the shutdown failed, and the process exits 1 (broker.server.Broker.stop).
        self._stopping = False
        self.stop_errors = 0
        self._last_descriptor_warning_ms = float("-inf")
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self.dir_failures.fail(self.log_dir, "create log dir", e)
        # Keyed by (topic, partition): what consumers' fetches and acks=all produces wait on,
        # fired when the high watermark moves; follower fetches wait on log_end_key, fired by
        # the leader's appends; `wake` fires both. So an append that does not move the high
        # watermark wakes only the followers' fetches and a high-watermark move only the
        # consumers and produces, none re-reading for the others' sake (Kafka's DelayedFetch
        # makes the same split: a follower's fetch completes on the log end, a consumer's on
        # the high watermark).
        self.appended = KeyedSignal()
        self._checkpointed = self._read_checkpoint()
        self._dir_clean = self._take_clean_shutdown_marker()
        self._start_checkpointed = self._read_checkpoint(START_CHECKPOINT)
        self._default_log_config = log_config("", {}, config)
        self._isr_changes: set[tuple[str, int]] = set()
        self._last_isr_change_ms = 0.0
        self._last_isr_propagation_ms = clock()
        self._tasks: list[asyncio.Task[None]] = []
        self._isr_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self.isr_shrinks = metrics.counter("isr_shrinks_total", "ISR shrinks on partitions this broker leads")
        self.isr_expands = metrics.counter("isr_expands_total", "ISR expansions on partitions this broker leads")
        metrics.gauge("under_replicated_partitions", "Led partitions whose ISR is smaller than the replica set",
                      lambda: [({}, sum(1 for p in self.partitions.values()
                                        if p.leader == self.broker_id and len(p.isr) < len(p.replicas)))])
        metrics.gauge("partition_bytes_in_rate", "Bytes/s appended to each hosted partition (produce or replication)",
                      lambda: [({"topic": p.topic, "partition": str(p.index)}, p.bytes_in.measure(self.clock()))
                               for p in self.partitions.values()])
        metrics.gauge("log_size_bytes", "Bytes in each hosted partition's log (Kafka's Log Size)",
                      lambda: [({"topic": p.topic, "partition": str(p.index)}, p.log.size_bytes)
                               for p in self.partitions.values()])
        metrics.gauge("log_end_offset", "Log end offset of each hosted partition (Kafka's Log LogEndOffset)",
                      lambda: [({"topic": p.topic, "partition": str(p.index)}, p.log_end_offset)
                               for p in self.partitions.values()])
        metrics.gauge("log_start_offset", "Log start offset of each hosted partition (Kafka's Log LogStartOffset)",
                      lambda: [({"topic": p.topic, "partition": str(p.index)}, p.log.log_start_offset)
                               for p in self.partitions.values() if not p.offline])
        metrics.gauge("log_segments", "Segments in each hosted partition's log (Kafka's Log NumLogSegments)",
                      lambda: [({"topic": p.topic, "partition": str(p.index)}, len(p.log.segments))
                               for p in self.partitions.values() if not p.offline])
        self.segments_deleted = metrics.counter("log_segments_deleted_total",
                                                "Segments deleted by retention (time, size or log start)")
        metrics.gauge("partitions", "Partitions hosted on this broker", lambda: [({}, len(self.partitions))])
        metrics.gauge("producer_ids", "Producer ids with state in each hosted partition (Kafka's ProducerIdCount)",
                      lambda: [({"topic": p.topic, "partition": str(p.index)}, len(p.producers.states))
                               for p in self.partitions.values() if p.producers is not None])
        metrics.gauge("leader_partitions", "Partitions this broker leads",
                      lambda: [({}, sum(1 for p in self.partitions.values() if p.leader == self.broker_id))])

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._isr_upkeep()))
        self._tasks.append(asyncio.create_task(self._checkpoint_loop()))
        self._tasks.append(asyncio.create_task(self._producer_expiry_loop()))
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        self._tasks.append(asyncio.create_task(self._index_files_loop()))
        self._tasks.append(asyncio.create_task(notify_controller(self.dir_failures, self.zk, self.broker_id)))

    async def wait_loaded(self) -> None:
        """Until load_logs has opened what it found (at once when no load runs)."""
        await self._load_done.wait()

    async def stop(self) -> None:
        before = [time.monotonic()]
        await self._load_done.wait()  # a load still running would add logs after the closes
        self._stopping = True
        # The appends queued are written and answered; any later one is refused and no writer
        # thread starts again, so nothing writes to a log while (or after) it closes.
        await self.writer.close()
        for part in list(self.partitions.values()):
            part.log.settle_now()  # nothing is in flight after the close: a no-op, for certain
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        before.append(time.monotonic())
        self._try_checkpoint()
        before.append(time.monotonic())
        # A round whose caller was cancelled above (or by the listeners' close) ends first: its
        # files are in flight until then, and this last round must see what it leaves.
        await asyncio.gather(*self._epoch_rounds, return_exceptions=True)
        await self.sync_epochs()
        before.append(time.monotonic())
        tasks_s, checkpoint_s, epochs_s = (round(b - a, 3) for a, b in zip(before, before[1:], strict=False))
        # Each log's close is a few fsyncs (segments, indexes, snapshot, directory): run on worker
        # threads, several at once, off the event loop. Nothing else touches a log by now (the
        # listeners, fetchers and the tasks above have stopped); the errors are handled here.
        # Durability once for all of them: every file written without fsync, one syncfs of the
        # log directory's file system, the clean-shutdown markers, one more syncfs. 10,000
        # partitions made ~50,000 fsyncs (26 s on this machine, 16 threads).
        parts = list(self.partitions.values()) + list(self._loaded.values())  # unclaimed ones close cleanly too
        self._loaded.clear()
        loop = asyncio.get_running_loop()
        times = [time.monotonic()]
        cpu = os.times()  # the process's: the closes' system time is mostly file creations (new partitions)
        with ThreadPoolExecutor(max_workers=_CLOSE_THREADS, thread_name_prefix="log-close") as pool:
            errors = await _in_chunks(loop, pool, _close_partition, parts)
            times.append(time.monotonic())
            closed_cpu = os.times()
            closed = [part for part, error in zip(parts, errors, strict=True) if error is None and not part.offline]
            for error in errors:
                if error is not None:
                    self.fail_dir("close", error)
            all_clean = (len(closed) == len(parts) and not self.log_dir_offline and not self._load_failed
                         and not self._unopened_offline)
            try:
                await loop.run_in_executor(pool, sync_file_system, self.log_dir)
                times.append(time.monotonic())
                if all_clean:  # one marker for the log dir (module docstring)
                    marks: list[KafkaStorageError | None] = []
                    await loop.run_in_executor(pool, _write_marker, self.log_dir / LOG_DIR_CLEAN_SHUTDOWN)
                else:  # only the logs that closed are clean
                    marks = await _in_chunks(loop, pool, _mark_clean, closed)
                times.append(time.monotonic())
                await loop.run_in_executor(pool, sync_file_system, self.log_dir)
                times.append(time.monotonic())
            except OSError as e:
                self.fail_dir("close", e)
                return
            for error in marks:
                if error is not None:
                    self.fail_dir("close", error)
        steps = [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)]
        log.info("log.closed", partitions=len(parts), tasks_s=tasks_s, checkpoint_s=checkpoint_s, epochs_s=epochs_s,
                 close_s=steps[0], sync_s=steps[1], mark_s=steps[2], sync_marks_s=steps[3],
                 close_user_s=round(closed_cpu.user - cpu.user, 2), close_sys_s=round(closed_cpu.system - cpu.system, 2))

    # ---- log directory failure -------------------------------------------------------

    @property
    def log_dir_offline(self) -> bool:
        return self.dir_failures.is_offline(self.log_dir)

    def is_offline(self, topic: str, index: int) -> bool:
        """The partition is hosted here but its log directory failed: KAFKA_STORAGE_ERROR to requests for it."""
        part = self.partitions.get((topic, index))
        if part is not None:
            return part.offline
        return (topic, index) in self._unopened_offline

    def on_offline(self, listener: Callable[[tuple[str, int]], None]) -> None:
        """`listener((topic, partition))` runs for each partition going offline (the fetcher manager stops it)."""
        self._offline_listeners.append(listener)

    def fail_dir(self, operation: str, error: BaseException) -> None:
        """Kafka's handleLogDirFailure: take the log directory and every partition in it offline.

        Departure: running out of descriptors (EMFILE, ENFILE; broker.log.open_files) says nothing
        about the disk. Kafka 2.8 takes the directory offline then; here only the call that met
        it fails (KAFKA_STORAGE_ERROR for that partition), and the event names the limits.
        """
        if self._stopping:
            self.stop_errors += 1
        if is_descriptor_exhaustion(error):
            self._descriptors_exhausted(operation, error)
            return
        if not self.dir_failures.fail(self.log_dir, operation, error):
            return
        # The appends in flight complete first (written: answered; after a failed write: refused),
        # so no write of the writer thread is under way in a directory now offline.
        for part in list(self.partitions.values()):
            try:
                part.log.settle_now()
            except Exception:
                log.exception("log_dir.settle_failed", broker_id=self.broker_id, topic=part.topic,
                              partition=part.index)
        for loaded in self._loaded.values():
            loaded.log.abandon()  # never served; the next start recovers them
        self._loaded.clear()
        self._take_offline(self.partitions.values())

    def _take_offline(self, parts: Iterable[Partition]) -> None:
        gone = []
        for part in parts:
            if not part.offline:
                part.offline = True
                part.leader = -1  # leads nothing any more: the leader gauges and ISR upkeep leave it out
                part.tracker = None
                gone.append(part.key)
        if gone:
            log.warning("log_dir.partitions_offline", log_dir=str(self.log_dir), partitions=len(gone))
        for tp in gone:
            for listener in self._offline_listeners:
                try:
                    listener(tp)
                except Exception as e:  # one listener's failure must not keep the others from running
                    log.error("log_dir.listener_failed", error=str(e))
        self.appended.fire_all()  # waiting acks=all produces and long-poll fetches answer now

    def _descriptors_exhausted(self, operation: str, error: BaseException) -> None:
        self.descriptor_errors += 1
        now = self.clock()
        if now - self._last_descriptor_warning_ms < 1000:
            return  # one event a second at most: a full pool can refuse many calls in a row
        self._last_descriptor_warning_ms = now
        log.error("log.open_files_exhausted", operation=operation, error=str(error),
                  soft_limit=soft_nofile_limit(), max_open_segment_files=SEGMENT_FILES.capacity,
                  open_segment_files=SEGMENT_FILES.live, refused=self.descriptor_errors,
                  action="KAFKA_STORAGE_ERROR for the partition; raise the soft RLIMIT_NOFILE or "
                         "log.max.open.segment.files, or host fewer partitions")

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def _open(self, topic: str, index: int, segment_bytes: int | None, log_open: bool = True) -> Partition:
        """The partition, its log opened (and created) if it is not yet; `log_open`: an event for a
        log opened here (a LeaderAndIsr of thousands says how many at its end instead)."""
        part = self.partitions.get((topic, index))
        if part is not None and part.offline:
            raise part.log.failed or KafkaStorageError(self.log_dir, "open", OSError("log dir is offline"))
        if part is None:
            if self.log_dir_offline:
                self._unopened_offline.add((topic, index))
                raise KafkaStorageError(self.log_dir, "open", OSError(self.dir_failures.offline[self.log_dir]))
            part = self._loaded.pop((topic, index), None)
            if part is not None:  # opened at start-up (load_logs): a role is all it lacks
                part.log.segment_bytes = segment_bytes or self.config.log_segment_bytes
                self.partitions[(topic, index)] = part
                return part
            try:
                # partition_dir refuses names that would leave the log dir (the handlers check first).
                part = self._open_files(topic, index, partition_dir(self.log_dir, topic, index), segment_bytes)
            except KafkaStorageError as e:
                self._unopened_offline.add((topic, index))
                self.fail_dir("open", e)
                raise
            except OSError as e:  # outside the log (leader-epoch or producer files): the same
                self._unopened_offline.add((topic, index))
                self.fail_dir("open", e)
                raise KafkaStorageError(self.log_dir, "open", e) from e
            self._unopened_offline.discard((topic, index))  # out of descriptors before, perhaps
            self._load_failed.discard((topic, index))
            self.partitions[(topic, index)] = part
            if log_open:
                log.info("partition.opened", topic=topic, partition=index, log_end_offset=part.log_end_offset,
                         high_watermark=part.high_watermark)
        return part

    async def make_new_log_dirs(self, keys: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The directories and first segment files of the partitions in `keys` not hosted here yet,
        made on worker threads before the loop opens their logs (broker.log.log.make_new_log_dir):
        a mkdir and a file creation cost ~1-1.5 ms of kernel time each, on the loop, creating
        10,000 partitions on this machine under load (py-spy). The partitions whose were made:
        those no state opens after all go again (`remove_unused_new_dirs`); cut short here, the
        ones it made go at once."""
        await self.wait_loaded()
        if self.log_dir_offline:
            return []
        todo: list[tuple[tuple[str, int], Path]] = []
        for key in keys:
            if key in self.partitions or key in self._loaded:
                continue
            try:
                todo.append((key, partition_dir(self.log_dir, *key)))
            except InvalidPartitionName:
                continue  # refused when its state is applied
        if not todo:
            return []
        loop = asyncio.get_running_loop()
        try:
            with ThreadPoolExecutor(max_workers=_NEW_DIR_THREADS, thread_name_prefix="log-create") as pool:
                made = await _in_chunks(loop, pool, make_new_log_dir, [d for _, d in todo])
        except BaseException:
            self.remove_unused_new_dirs([key for key, _ in todo])  # the threads are done (the pool's exit)
            raise
        return [key for (key, _), ok in zip(todo, made, strict=True) if ok]

    def remove_unused_new_dirs(self, keys: Iterable[tuple[str, int]]) -> int:
        """The directories `make_new_log_dirs` made ahead for partitions no state opened after all
        (a LeaderAndIsr cut short: cancelled by a shutdown, or failing midway) removed, while
        they hold nothing but the empty first segment. On the loop, as opens are: a partition
        opened meanwhile is hosted, and its directory is left. Left behind, one is harmless all
        the same (a crash leaves them too): at the next start it is loaded as the empty log it is,
        waiting for a role, as a new replica's log would start. How many were removed."""
        if self.log_dir_offline:
            return 0
        removed = 0
        for key in keys:
            if key in self.partitions or key in self._loaded:
                continue
            if remove_new_log_dir(partition_dir(self.log_dir, *key)):
                removed += 1
        if removed:
            log.info("log.unused_new_dirs_removed", partitions=removed)
        return removed

    def _open_files(self, topic: str, index: int, directory: Path, segment_bytes: int | None,
                    clean: bool = False) -> Partition:
        """A partition's log, leader epochs and producer state, opened (and recovered) from its
        directory. Touches nothing shared but the descriptor pool (which locks): load_logs may run
        it on worker threads. What it changes in the epochs is written by the role given later.
        `clean`: the log dir's clean-shutdown marker was there (else the partition's own counts)."""
        plog = Log.open(directory, segment_bytes=segment_bytes or self.config.log_segment_bytes,
                        log_start_offset=self._start_checkpointed.get((topic, index), 0), clean_shutdown=clean,
                        index_files=self.index_files)
        plog.page_cache_window = self.config.log_page_cache_window_bytes
        producers = PartitionProducers(plog, self.config.transactional_id_expiration_ms)
        try:
            # What open changes is written by become_leader's new epoch or become_follower.
            epochs = LeaderEpochFile.open(plog, self.epoch_syncs, write=False)
            producers.load(self.wall_clock(), plog.opened_clean)
        except BaseException:
            plog.abandon()
            raise
        plog.names_at_open = None  # stale from here on
        part = Partition(topic, index, plog, epochs, producers=producers)
        part.high_watermark = min(self._checkpointed.get((topic, index), 0), plog.log_end_offset)
        return part

    async def load_logs(self) -> None:
        """Every partition directory in the log dir opened, on worker threads or between the loop's
        other work (see the module docstring).

        A log that fails to open here is left alone: the LeaderAndIsr that names it opens it again
        on the loop, where a failure is handled as it always was (KAFKA_STORAGE_ERROR, the
        directory offline, or that partition alone when out of descriptors)."""
        if self.log_dir_offline:
            return
        self._load_done.clear()
        # The cyclic garbage collector is paused while the logs open, and what they made is then
        # frozen (left out of collections) for a while: 10,000 opens make millions of objects,
        # and collecting as they are made (a young collection every 700 allocations, older ones
        # over the whole heap) cost as much CPU as the opens did (1.1-1.9 s of user time with
        # it, 0.7-0.8 without, in-process). Unfrozen after _UNFREEZE_AFTER_S, off the start-up.
        collecting = gc.isenabled()
        gc.disable()
        try:
            await self._load_logs()
        finally:
            if collecting:
                gc.freeze()
                gc.enable()
                asyncio.get_running_loop().call_later(_UNFREEZE_AFTER_S, gc.unfreeze)
            self._loading.clear()
            for key in sorted(self._delete_after_load):
                self._delete_stopped(key)
            self._delete_after_load.clear()
            self._load_done.set()

    async def _load_logs(self) -> None:
        started = time.monotonic()
        try:
            names = os.listdir(self.log_dir)
        except OSError as e:
            self.fail_dir("load logs", e)
            return
        found: list[tuple[tuple[str, int], Path]] = []
        for name in names:
            topic, dash, number = name.rpartition("-")
            if not dash or not number.isdigit() or (topic, int(number)) in self.partitions:
                continue
            try:
                found.append(((topic, int(number)), partition_dir(self.log_dir, topic, int(number))))
            except InvalidPartitionName:
                continue  # not a partition's directory
        self._loading = {key for key, _ in found}
        loop_cpu = time.thread_time()
        if self._dir_clean:
            # After a clean shutdown an open is Python work (indexes read lazily) with a few small
            # reads: on the event loop, a chunk at a time, it costs only its CPU. On worker threads
            # it fought the loop (the controller's reads, LeaderAndIsr) for the GIL, each side
            # waiting out the other's switch interval at every system call: 10,000 opens of 2 s
            # of CPU took 4.5-7.6 s while the controller's reads went from 1.1 to 5.3 s.
            opened = []
            for i in range(0, len(found), _LOOP_CHUNK):
                opened += [self._try_open_files(item) for item in found[i:i + _LOOP_CHUNK]]
                await asyncio.sleep(0)
        else:
            # Recovery reads whole segments: the threads overlap that I/O.
            loop = asyncio.get_running_loop()
            with ThreadPoolExecutor(max_workers=_LOAD_THREADS, thread_name_prefix="log-load") as pool:
                opened = await _in_chunks(loop, pool, self._try_open_files, found)
        failed = 0
        for (key, _), part in zip(found, opened, strict=True):
            if part is None:
                failed += 1
                self._load_failed.add(key)
            elif key in self.partitions or self.log_dir_offline:
                part.log.abandon()  # LeaderAndIsr waits for the load: never two logs of one partition
            else:
                self._loaded[key] = part
        log.info("log.loaded", partitions=len(self._loaded), failed=failed, clean=self._dir_clean,
                 duration_s=round(time.monotonic() - started, 3), loop_cpu_s=round(time.thread_time() - loop_cpu, 3))

    def _try_open_files(self, item: tuple[tuple[str, int], Path]) -> Partition | None:
        (topic, index), directory = item
        try:
            return self._open_files(topic, index, directory, None, self._dir_clean)
        except (KafkaStorageError, OSError) as e:
            log.warning("log.load_failed", topic=topic, partition=index, error=str(e))
            return None

    def _take_clean_shutdown_marker(self) -> bool:
        """Whether the last shutdown left the log dir's marker; removed at once, durably, so that
        nothing appended from now on can be mistaken for a cleanly closed log after a crash."""
        marker = self.log_dir / LOG_DIR_CLEAN_SHUTDOWN
        try:
            marker.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            self.dir_failures.fail(self.log_dir, "clean shutdown marker", e)
            return False
        try:
            fsync_dir(self.log_dir)
        except OSError as e:
            self.dir_failures.fail(self.log_dir, "clean shutdown marker", e)
            return False
        return True

    def _read_checkpoint(self, name: str = CHECKPOINT) -> dict[tuple[str, int], int]:
        """Kafka's OffsetCheckpointFile: `0`, a count, then `topic partition offset` lines."""
        path = self.log_dir / name
        out: dict[tuple[str, int], int] = {}
        try:
            lines = path.read_text().splitlines()
            for line in lines[2:]:
                topic, p, off = line.rsplit(" ", 2)
                out[(topic, int(p))] = int(off)
        except (OSError, ValueError):
            pass
        return out

    def _hosted(self) -> list[tuple[tuple[str, int], Partition]]:
        """Every open log, with a role or still waiting for one: the checkpoints keep them all."""
        return [*self.partitions.items(), *self._loaded.items()]

    def write_checkpoint(self) -> None:
        """Kafka's replication-offset-checkpoint: high watermarks survive a restart."""
        rows = [f"{t} {p} {part.high_watermark}" for (t, p), part in sorted(self._hosted())
                if not part.offline]
        _write_checkpoint(self.log_dir / CHECKPOINT, rows)

    def write_start_checkpoint(self) -> None:
        """Kafka's log-start-offset-checkpoint: where each log starts survives a restart.

        Departure: every log is listed; Kafka lists only logs whose start lies inside their first
        segment (DeleteRecords, a follower's leader start), as a start at a segment boundary is
        also found by reading the directory. Both read back the same.
        """
        rows = [f"{t} {p} {part.log.log_start_offset}" for (t, p), part in sorted(self._hosted())
                if not part.offline]
        _write_checkpoint(self.log_dir / START_CHECKPOINT, rows)

    def _try_checkpoint(self) -> None:
        # Kafka's checkpointHighWatermarks: a failed write fails the directory. An offline one is
        # not written again: its file stays as it was, and the next start recovers from it.
        if self.log_dir_offline or self._loading:
            return  # while logs load, the rows would leave them out (module docstring)
        try:
            self.write_checkpoint()
            self.write_start_checkpoint()
        except OSError as e:
            self.fail_dir("checkpoint", e)

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(5)
            self._try_checkpoint()
            await self.sync_epochs()

    async def _index_files_loop(self) -> None:
        """New segments' index files made in the background, a few seconds after the segment.

        A new segment's index files are not made with it (creating 10,000 partitions creates 20,000
        files fewer): a SIGTERM soon after creating 10,000 partitions would otherwise create them
        in its close, ~0.3-0.6 ms of kernel time each on this machine's ext4, 2.8 s of shutdown on
        a quiet machine and 10.5 s under two busy loops. Made here, on one worker thread, a chunk
        at a time, they are off both paths; the close then only writes into them (and creates
        none for a segment still empty). Only the segments registered as pending are looked at,
        so a pass with nothing pending costs nothing (walking 10,000 partitions cost ~1 ms of the
        loop every pass). An I/O error fails the log directory, as any other storage error does;
        out of descriptors, the segments left are tried again at the next pass."""
        while True:
            await asyncio.sleep(_INDEX_FILES_EVERY_S)
            if len(self.index_files):
                await self.make_pending_index_files()

    async def make_pending_index_files(self) -> None:
        """One pass of _index_files_loop: the files of every segment pending, a chunk a job."""
        if self.log_dir_offline:
            self.index_files.take()  # nothing more is written to a failed directory
            return
        pending = [seg for seg in self.index_files.take() if not seg.files_made and not seg.closed]
        for i in range(0, len(pending), _CHUNK):
            chunk = pending[i:i + _CHUNK]
            made, error = await asyncio.to_thread(make_index_files, chunk)
            for seg in chunk[:made]:
                seg.files_were_made()
            if error is not None:
                failed = chunk[made]
                self.fail_dir("make index files", KafkaStorageError(failed.log_path.parent, "make index files", error))
                if not self.log_dir_offline:  # out of descriptors: the rest waits for the next pass
                    self.index_files.add_all(pending[i + made:])
                return
            if self.log_dir_offline:  # failed meanwhile (an append, a checkpoint)
                return

    async def sync_epochs(self) -> None:
        """The leader-epoch checkpoints written since the last call, fsynced together on worker
        threads (broker.log.leader_epoch_checkpoint.DeferredSyncs): before a LeaderAndIsr is
        answered, every checkpoint interval and at shutdown. A failure fails the directory.

        The round runs in a task of its own, shielded: a caller cancelled meanwhile (a LeaderAndIsr
        whose connection a shutdown aborts, the checkpoint task `stop` cancels) leaves it to
        finish, so its `done` always runs and `stop` can wait for it (`_epoch_rounds`). Cut short,
        its files would stay in flight with their jobs taken, and the shutdown's own round would
        find nothing to write: a new leader's epoch could miss the file of a log then closed
        cleanly, which no open recovers."""
        if not len(self.epoch_syncs):
            return
        round_ = asyncio.get_running_loop().create_task(self._epoch_round())
        self._epoch_rounds.add(round_)
        round_.add_done_callback(self._epoch_rounds.discard)
        await asyncio.shield(round_)

    async def _epoch_round(self) -> None:
        async with self._epoch_sync_lock:  # one round at a time: a file is in one round's jobs only
            jobs = self.epoch_syncs.take()  # rendered here, on the loop that changes the caches
            failures = await asyncio.to_thread(DeferredSyncs.run, jobs)
            failures += self.epoch_syncs.done(failures)
        for path, error in failures[:1]:
            self.fail_dir("leader epoch checkpoint", KafkaStorageError(path.parent, "leader epoch checkpoint", error))

    # ---- roles (LeaderAndIsr, StopReplica) -------------------------------------------

    def become_leader(self, topic: str, index: int, replicas: list[int], leader_epoch: int, isr: list[int],
                      zk_version: int, controller_epoch: int, min_isr: int, segment_bytes: int | None,
                      log_open: bool = True) -> Partition:
        part = self._open(topic, index, segment_bytes, log_open)
        part.log.settle_now()  # appends of the previous epoch complete under it
        was_leader = part.leader == self.broker_id
        new_epoch = not was_leader or leader_epoch != part.leader_epoch
        part.replicas, part.isr, part.leader_epoch = list(replicas), list(isr), leader_epoch
        part.leader, part.zk_version, part.controller_epoch = self.broker_id, zk_version, controller_epoch
        part.min_insync_replicas = min_isr
        try:
            # Kafka's makeLeader: this epoch's messages start at our log end (KIP-279: also when
            # the epoch is not new to us, so a follower asking for it gets our log end).
            # Written by sync_epochs' threads before the LeaderAndIsr is answered, not here on the
            # loop (10,000 files at a restart; broker.log.leader_epoch_checkpoint says why a crash
            # before then loses nothing).
            part.epochs.assign(leader_epoch, part.log_end_offset, later=True)
            part.epochs.flush_if_dirty(later=True)  # the open's own changes, when the epoch was not new
        except KafkaStorageError as e:
            self.fail_dir("leader epoch checkpoint", e)
            raise
        if new_epoch:  # Kafka only runs makeLeader for a newer epoch; a repeat changes nothing
            part.leader_epoch_start_offset = part.log_end_offset
        if not was_leader or part.tracker is None:
            part.tracker = IsrTracker(self.broker_id, replicas, self.clock(), self.config.replica_lag_time_max_ms)
        else:
            part.tracker.set_replicas(replicas, self.clock())
        self._advance_hw(part)
        self.wake(part.key)  # a new epoch: waiting fetches check it (KIP-320 fencing)
        return part

    def become_follower(self, topic: str, index: int, replicas: list[int], leader: int, leader_epoch: int,
                        isr: list[int], zk_version: int, controller_epoch: int,
                        segment_bytes: int | None, log_open: bool = True) -> Partition:
        part = self._open(topic, index, segment_bytes, log_open)
        part.log.settle_now()  # a leader's appends in flight complete (and are answered) first
        try:
            part.epochs.flush_if_dirty(later=True)  # what the open changed (a follower assigns no epoch here)
        except KafkaStorageError as e:
            self.fail_dir("leader epoch checkpoint", e)
            raise
        part.replicas, part.isr, part.leader_epoch = list(replicas), list(isr), leader_epoch
        part.leader, part.zk_version, part.controller_epoch = leader, zk_version, controller_epoch
        part.leader_epoch_start_offset = -1
        part.tracker = None
        # No truncation here (KIP-101): the replica fetcher truncates before it fetches, by the
        # leader's answer to OffsetForLeaderEpoch, or to the high watermark without epochs.
        self.wake(part.key)
        return part

    def set_log_config(self, part: Partition, config: LogConfig) -> None:
        """The topic's retention and roll settings, applied at once (segment.bytes, segment.ms live)."""
        part.log_config = config
        part.log.segment_bytes = config.segment_bytes
        part.log.segment_ms = config.segment_ms

    def set_topic_log_config(self, topic: str, config: LogConfig) -> None:
        for part in self.partitions.values():
            if part.topic == topic:
                self.set_log_config(part, config)

    def set_min_insync_replicas(self, topic: str, min_isr: int) -> None:
        """A topic's `min.insync.replicas` changed: every hosted partition of it takes the new value."""
        for part in self.partitions.values():
            if part.topic == topic:
                part.min_insync_replicas = min_isr
                self.wake(part.key)  # acks=all produces waiting on it check it again

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        """Stop a replica, deleting its log if asked; InvalidPartitionName for a name no log dir may hold."""
        partition_dir(self.log_dir, topic, index)  # refuses the name before anything is touched
        part = self.partitions.get((topic, index))
        if part is not None:
            part.log.settle_now()  # its appends in flight complete before it stops or goes
            # No longer led here, deleted or not: a reassignment's last step and a topic deletion
            # send only StopReplica(delete), and an acks=all produce waiting on the object it holds
            # must see that (its high watermark will never move again), not wait for its timeout.
            part.leader = -1
            part.tracker = None
        self.wake((topic, index))  # what waits on it answers (NOT_LEADER_FOR_PARTITION)
        if not delete:
            return
        if part is not None:
            del self.partitions[(topic, index)]
            part.log.delete()
        elif (topic, index) in self._loading:
            self._delete_after_load.add((topic, index))  # a worker thread has it open now
        else:
            self._delete_stopped((topic, index))
        self._load_failed.discard((topic, index))
        self._checkpointed.pop((topic, index), None)
        self._isr_locks.pop((topic, index), None)
        log.info("partition.deleted", topic=topic, partition=index)

    def _delete_stopped(self, key: tuple[str, int]) -> None:
        """A stopped replica's log deleted: opened at start-up and never given a role, or only on disk."""
        loaded = self._loaded.pop(key, None)
        if loaded is not None:
            loaded.log.delete()
        else:
            shutil.rmtree(partition_dir(self.log_dir, *key), ignore_errors=True)

    # ---- produce ---------------------------------------------------------------------

    def wake(self, tp: tuple[str, int]) -> None:
        """Everything waiting on `tp`, consumers, followers and produces: a change of role,
        epoch, ISR or log, after which any of them may answer differently."""
        self.appended.fire(tp)
        self.appended.fire(log_end_key(tp))

    async def wait_for_fetch(self, keys: list[tuple[str, int]], *, follower: bool, timeout_s: float) -> None:
        """A long-poll fetch's wait on its partitions: a follower's for their log ends to move, a
        consumer's for their high watermarks (and either for `wake`)."""
        await self.appended.wait([log_end_key(tp) for tp in keys] if follower else keys, timeout_s)

    def _advance_hw(self, part: Partition) -> None:
        if part.tracker is None:
            return
        new_hw = part.tracker.high_watermark(part.isr, part.log_end_offset)
        if new_hw > part.high_watermark:
            part.high_watermark = new_hw
            self.appended.fire(part.key)

    def append(self, part: Partition, data: memoryview | bytes, acks: int, config: ValidationConfig | None = None,
               produce_version: int = 2, transactional_id: str | None = None) -> LeaderAppend:
        """A client's record set, validated (protocol.records.validator), numbered and appended.

        Nothing is appended when anything fails; the result carries the partition's error code
        (and Produce v8's record errors). Offsets are assigned by writing the log end offset
        into the validated batch, which also gets this leader's epoch. Without a config, the
        broker's `message.max.bytes` and Kafka's timestamp defaults apply.

        Synchronous (the offsets topic's own appends): the write is made here, on the loop,
        after every append in flight of the log (`submit_append`) completed.
        """
        checked = self._validate(part, data, acks, config, produce_version, transactional_id)
        if isinstance(checked, LeaderAppend):
            return checked
        part.log.settle_now()  # the producer check and the offsets below see every earlier append
        if part.offline:
            return LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR)
        staged = self._check_producer(part, checked)  # settled: nothing in flight to check against
        if isinstance(staged, LeaderAppend):
            return staged
        if isinstance(staged, asyncio.Future):  # only a retry of a batch in flight, and none is
            raise RuntimeError("a synchronous append met a producer batch in flight")
        return self._write_inline(part, checked, staged)

    def _write_inline(self, part: Partition, validated: Validated, staged: ProducerAppend | None) -> LeaderAppend:
        """The synchronous write on the loop (main's path): the log has no append in flight."""
        first, last = validated.assign_offsets(part.log_end_offset)
        epoch = part.leader_epoch
        validated.stamp_leader_epoch(epoch)
        try:
            part.log.append(validated.buffer, last)
        except KafkaStorageError as e:
            # The log left no trace of this append; the directory goes offline all the same.
            self.fail_dir("append", e)
            return LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR)
        return self._appended(part, staged, epoch, first, last, len(validated.buffer), validated.log_append_time)

    async def submit_append(self, part: Partition, data: memoryview | bytes, acks: int,
                            config: ValidationConfig | None = None, produce_version: int = 2,
                            transactional_id: str | None = None) -> asyncio.Future[LeaderAppend]:
        """submit_append_now, awaitable (it never waits)."""
        return self.submit_append_now(part, data, acks, config, produce_version, transactional_id)

    def submit_append_now(self, part: Partition, data: memoryview | bytes, acks: int,
                          config: ValidationConfig | None = None, produce_version: int = 2,
                          transactional_id: str | None = None) -> asyncio.Future[LeaderAppend]:
        """A leader Produce append, its write handed to the log directory's writer thread
        (broker.log.writer): returns once its offsets are assigned (in the order of the calls),
        with a future of its answer, which completes once its bytes are in the file (and the
        log end offset, producer state, epochs and high watermark moved), or failed.

        Validation and the checks are `append`'s. An idempotent producer's batch is checked
        against the producer state its batches still in flight on this partition will leave, and
        queued behind them without waiting (see `_check_producer` for why that is safe).
        """
        loop = self._loop
        if loop is None or loop.is_closed():  # found once: each get_running_loop() is a getpid()
            loop = self._loop = asyncio.get_running_loop()
        answer: asyncio.Future[LeaderAppend] = loop.create_future()
        refusal = self._still_leader(part)  # the caller's check may predate an await (its config)
        if refusal is not None:
            answer.set_result(LeaderAppend(refusal))
            return answer
        checked = self._validate(part, data, acks, config, produce_version, transactional_id)
        if isinstance(checked, LeaderAppend):
            answer.set_result(checked)
            return answer
        validated = checked
        writer = self.writer
        if not writer.accepting:
            # Stopping (or the directory failed): nothing more is queued, no thread started.
            code = ErrorCode.NOT_LEADER_FOR_PARTITION if writer.stopped and not part.offline \
                else ErrorCode.KAFKA_STORAGE_ERROR
            answer.set_result(LeaderAppend(code))
            return answer
        producer_id = validated.producer_id if part.producers is not None else -1
        in_flight = part.producer_appends.get(producer_id) if producer_id >= 0 else None
        staged = self._check_producer(part, validated, part.log.next_offset, in_flight)
        if isinstance(staged, asyncio.Future):
            return staged  # a retry of a batch still in flight: answered as it is
        if isinstance(staged, LeaderAppend):
            answer.set_result(staged)
            return answer
        if len(validated.buffer) < INLINE_APPEND_BYTES and not part.log.appends_in_flight:
            # Small, and nothing of this log is queued or awaiting completion: written here, as
            # `append` does, and answered at once (no thread hand-off, no loop wake-up). The
            # directory's writer may have other logs' writes in flight: each log is its own file,
            # so their order does not matter; `accepting` above refuses a failed directory.
            # (Nothing in flight: no producer's batch is either, so `staged` is against the
            # committed state.)
            answer.set_result(self._write_inline(part, validated, staged))
            return answer
        first, last = validated.assign_offsets(part.log.next_offset)
        epoch = part.leader_epoch
        validated.stamp_leader_epoch(epoch)
        try:
            entry = part.log.start_append(validated.buffer, last)
        except KafkaStorageError as e:
            self.fail_dir("append", e)
            answer.set_result(LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR))
            return answer
        append_time = validated.log_append_time
        record: InFlightAppend | None = None
        if staged is not None:
            record = InFlightAppend(staged, first, last, answer)
            part.producer_appends.setdefault(producer_id, []).append(record)

        def written(entry: PendingAppend) -> None:
            if record is not None:
                self._producer_append_done(part, producer_id, record, entry.state == FAILED)
            try:
                if record is not None and record.poisoned and entry.state != FAILED:
                    result = self._poisoned_append(part, entry)
                else:
                    result = self._append_written(part, entry, staged, epoch, first, last, append_time)
            except Exception:
                # A bug: still answered (a produce must never hang), as a storage error.
                log.exception("produce.completion_failed", broker_id=self.broker_id, topic=part.topic,
                              partition=part.index)
                result = LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR)
                if record is not None:
                    self._poison_later(part, producer_id, record)
            if not answer.done():
                answer.set_result(result)

        entry.callback = written
        writer.submit(entry)
        return answer

    def _producer_append_done(self, part: Partition, producer_id: int, record: InFlightAppend,
                              failed: bool) -> None:
        """An idempotent append leaves the in-flight list as its completion starts (written: its
        state is committed in this same call; failed: it never will be). A failed one poisons the
        later ones of its producer first, which were checked against it."""
        if failed:
            self._poison_later(part, producer_id, record)
        records = part.producer_appends.get(producer_id)
        if records is None:
            return
        try:
            records.remove(record)
        except ValueError:
            pass
        if not records:
            del part.producer_appends[producer_id]

    def _poison_later(self, part: Partition, producer_id: int, record: InFlightAppend) -> None:
        records = part.producer_appends.get(producer_id, [])
        seen = False
        for other in records:
            if other is record:
                seen = True
            elif seen:
                other.poisoned = True

    def _poisoned_append(self, part: Partition, entry: PendingAppend) -> LeaderAppend:
        """Written, but an earlier batch of its producer, which its sequence check counted on,
        failed. The writer fails every entry after a failed write, so only a failure outside the
        thread (a completion that raised) gets here: the directory goes offline, as it did for
        that failure, and this batch is answered as not written; its producer state is not
        committed."""
        log.error("produce.after_failed_producer_batch", broker_id=self.broker_id, topic=part.topic,
                  partition=part.index, last_offset=entry.last_offset)
        self.fail_dir("append", KafkaStorageError(part.log.directory, "append", OSError(
            errno.EIO, "an earlier batch of its producer failed")))
        return LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR)

    def _append_written(self, part: Partition, entry: PendingAppend, staged: ProducerAppend | None, epoch: int,
                        first: int, last: int, append_time: int) -> LeaderAppend:
        """On the loop, in order: a submitted append's bytes are in the file (or it failed)."""
        if entry.state == FAILED:
            error = entry.error
            if isinstance(error, WriterStopped):
                return LeaderAppend(ErrorCode.NOT_LEADER_FOR_PARTITION)
            if entry.attempted and error is not None and not isinstance(error, Unwritten):
                log.error("produce.write_failed", broker_id=self.broker_id, topic=part.topic,
                          partition=part.index, error=str(error))
                self.fail_dir("append", KafkaStorageError(part.log.directory, "append", error))
            elif not self.log_dir_offline and error is not None:
                self.fail_dir("append", KafkaStorageError(part.log.directory, "append", error))
            return LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR)
        return self._appended(part, staged, epoch, first, last, entry.size, append_time)

    def _appended(self, part: Partition, staged: ProducerAppend | None, epoch: int, first: int, last: int,
                  size: int, append_time: int) -> LeaderAppend:
        """A leader append's bytes are in the log (inline or by the writer thread): the producer
        state, the epoch that stamped it, the bytes-in rate, the high watermark, the followers'
        fetches, and the answer."""
        producers = part.producers
        try:
            if producers is not None and staged is not None:
                producers.states.commit(staged, last + 1)
                producers.after_append()
            if epoch >= 0:  # the epoch just stamped; become_leader usually has it
                part.epochs.assign(epoch, first)
        except KafkaStorageError as e:
            self.fail_dir("append", e)
            return LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR)
        part.bytes_in.record(size, self.clock())
        self._advance_hw(part)
        self.appended.fire(log_end_key(part.key))  # the followers' fetches (the high watermark fired above if it moved)
        return LeaderAppend(ErrorCode.NONE, first, last, append_time, part.log.log_start_offset)

    def _still_leader(self, part: Partition) -> ErrorCode | None:
        """After a wait: the partition's answer if it is no longer ours to append to."""
        if part.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if part.leader != self.broker_id or self.partitions.get(part.key) is not part:
            return ErrorCode.NOT_LEADER_FOR_PARTITION
        return None

    def _validate(self, part: Partition, data: memoryview | bytes, acks: int, config: ValidationConfig | None,
                  produce_version: int, transactional_id: str | None) -> Validated | LeaderAppend:
        """The checks and validation before a leader append: the validated batch, or the answer."""
        if config is None:
            config = ValidationConfig(self.config.message_max_bytes)
        if part.offline:
            return LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR)
        if acks == -1 and len(part.isr) < part.min_insync_replicas:
            return LeaderAppend(ErrorCode.NOT_ENOUGH_REPLICAS)
        if len(data) > part.log.segment_bytes:
            return LeaderAppend(ErrorCode.RECORD_LIST_TOO_LARGE)
        try:
            # In place: `data` is a slice of the request frame's own buffer (nothing else reads it
            # once it is appended), so a batch stored as sent is numbered where it lies, not copied.
            return validate(data, produce_version, int(time.time() * 1000), config, transactional_id, in_place=True)
        except RecordsError as e:
            log.warning("produce.invalid_records", topic=part.topic, partition=part.index, error_code=e.error_code)
            return LeaderAppend(ErrorCode(e.error_code), record_errors=e.record_errors, error_message=str(e))

    def _check_producer(self, part: Partition, validated: Validated, base_offset: int | None = None,
                        in_flight: list[InFlightAppend] | None = None,
                        ) -> ProducerAppend | LeaderAppend | asyncio.Future[LeaderAppend] | None:
        """Idempotent producers: the batch checked against the partition's producer state before
        anything is assigned or written (no await from here to the offsets' assignment). The
        staged changes to commit once it is written; None without a producer id; the answer
        (a refusal, or a duplicate's original offsets); or, for a retry of a batch of
        `in_flight`, a future of its answer (that batch's offsets once it is written, its error
        if it fails).

        `in_flight`: this producer's appends on the partition checked and queued to the writer
        but not yet written (submit_append). The batch is checked as if they were committed:
        their last sequence and epoch, and their offsets for duplicates (the last five batches,
        committed and in flight together, Kafka 2.8's ProducerStateEntry batch metadata). That
        is Kafka's answer for the order the appends take in the log, and it is safe because a
        staged state is committed only once its own bytes are written, and a batch checked
        against one in flight is never written unless that one was: the directory's writer is
        FIFO (so the later batch's write comes after), and a failed write fails every later
        entry of the directory unwritten and refuses later submissions (`DirWriter.accepting`),
        the directory going offline (`_append_written`). So when a batch commits, every batch
        it was checked against has committed before it, in order, and the committed state is
        the one it was checked against; when one fails, the later ones fail too and none of
        their state is committed. (A completion that fails on the loop after a good write is
        the one case the writer does not cover: `_producer_append_done` marks the later ones
        poisoned, and they are answered KAFKA_STORAGE_ERROR without their state, the directory
        offline.) Transactional batches never get here (this broker serves no transactions).
        """
        producers = part.producers
        if producers is None or validated.producer_id < 0:
            return None
        batch = ProducerBatch(validated.producer_id, validated.producer_epoch, validated.base_sequence,
                              validated.last_offset_delta, validated.max_timestamp, 0)
        try:
            staged = producers.states.check_client(
                [batch], part.log_end_offset if base_offset is None else base_offset,
                [r.staged for r in in_flight] if in_flight else ())
        except ProducerStateError as e:
            log.warning("produce.producer_state_refused", topic=part.topic, partition=part.index,
                        error_code=int(e.error_code), reason=str(e))
            return LeaderAppend(e.error_code, error_message=str(e))
        if isinstance(staged, BatchMetadata):
            # A retry of a batch already in the log (or on its way there): Kafka answers NONE with
            # its original offsets (and, under LogAppendTime, its original append time).
            dup = staged
            log_append_time = validated.log_append_time >= 0
            log.info("produce.duplicate_batch", topic=part.topic, partition=part.index,
                     producer_id=validated.producer_id, base_sequence=validated.base_sequence,
                     original_offset=dup.first_offset)
            for record in in_flight or ():
                if record.first_offset == dup.first_offset:
                    return self._answer_after(part, record.answer, dup, log_append_time)
            return self._duplicate_answer(part, dup, log_append_time)
        return staged

    def _duplicate_answer(self, part: Partition, dup: BatchMetadata, log_append_time: bool) -> LeaderAppend:
        return LeaderAppend(ErrorCode.NONE, dup.first_offset, dup.last_offset,
                            dup.timestamp if log_append_time else -1, part.log.log_start_offset)

    def _answer_after(self, part: Partition, original: asyncio.Future[LeaderAppend], dup: BatchMetadata,
                      log_append_time: bool) -> asyncio.Future[LeaderAppend]:
        """A retry of a batch in flight: once that batch is written, the duplicate's answer (its
        offsets, as for any retry of a batch in the log); if it fails, its error. Never an
        answer before the original's bytes are in the log."""
        answer: asyncio.Future[LeaderAppend] = asyncio.get_running_loop().create_future()

        def done(f: asyncio.Future[LeaderAppend]) -> None:
            if answer.done():
                return
            result = f.result() if not f.cancelled() else LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR)
            if result.error_code != ErrorCode.NONE:
                answer.set_result(LeaderAppend(result.error_code, error_message=result.error_message))
            else:
                answer.set_result(self._duplicate_answer(part, dup, log_append_time))

        original.add_done_callback(done)
        return answer

    async def wait_for_hw(self, part: Partition, offset: int, timeout_s: float) -> ErrorCode:
        deadline = time.monotonic() + timeout_s
        while part.high_watermark < offset:
            if part.offline:
                return ErrorCode.KAFKA_STORAGE_ERROR
            if part.leader != self.broker_id:
                return ErrorCode.NOT_LEADER_FOR_PARTITION
            if len(part.isr) < part.min_insync_replicas:
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self.appended.wait((part.key,), remaining)
        return ErrorCode.NONE

    # ---- follower append (from the replica fetcher) ----------------------------------

    def append_as_follower(self, part: Partition, data: bytes | memoryview, leader_hw: int) -> int:
        """Append the whole entries of a fetched slice; returns the bytes appended."""
        end = 0
        if data:  # an idle partition of the fetch has none: only the leader's high watermark is news
            try:
                end, last_offset = shallow_validate(data)
            except RecordsError as e:
                log.error("follower.invalid_records", topic=part.topic, partition=part.index, error_code=e.error_code)
                raise
        if end:
            appended = data[:end] if end < len(data) else data
            try:
                part.log.append(appended, last_offset)
                part.epochs.assign_from(appended)  # the leader's epochs, as stamped in its batches
                if part.producers is not None:
                    part.producers.replicated(appended)  # no checks on a follower, only the state
            except KafkaStorageError as e:
                self.fail_dir("append", e)
                raise
            part.bytes_in.record(end, self.clock())
        new_hw = min(leader_hw, part.log_end_offset)
        if new_hw > part.high_watermark:
            part.high_watermark = new_hw
        if end:
            self.wake(part.key)  # a debug consumer (replica id -2) may long-poll a follower
        return end

    def truncate_follower(self, tp: tuple[str, int], offset: int) -> None:
        """Cut a follower's log to `offset` (the epoch truncation, or the leader's log end below ours)."""
        part = self.partitions.get(tp)
        if part is not None and not part.offline:
            if offset < part.log_end_offset:
                log.info("partition.truncating", topic=tp[0], partition=tp[1], to=offset,
                         log_end_offset=part.log_end_offset)
            try:
                below_start = offset < part.log.log_start_offset
                part.log.truncate_to(offset)
                if below_start:
                    part.epochs.clear()  # the log started again, empty, at `offset` (Kafka's clearAndFlush)
                else:
                    part.epochs.truncate_from_end(part.log_end_offset)
                self._producers_truncated(part)
            except KafkaStorageError as e:
                self.fail_dir("truncate", e)
                raise
            # A compressed wrapper straddling `offset` goes whole, so the log may now end below it.
            part.high_watermark = min(part.high_watermark, part.log_end_offset)

    def restart_follower_at(self, tp: tuple[str, int], offset: int) -> None:
        """The leader's log starts above our end: drop our log and start empty at `offset`."""
        part = self.partitions.get(tp)
        if part is not None and not part.offline:
            try:
                part.log.truncate_fully_and_start_at(offset)
                part.epochs.clear()
                if part.producers is not None:
                    part.producers.restarted_at(offset)
            except KafkaStorageError as e:
                self.fail_dir("truncate", e)
                raise
            part.high_watermark = offset

    # ---- retention -------------------------------------------------------------------

    async def _retention_loop(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.apply_retention_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retention.failed")

    def apply_retention_all(self) -> int:
        """One retention pass over every hosted log (Kafka's LogManager.cleanupLogs); segments deleted."""
        deleted = 0
        for part in list(self.partitions.values()):
            if not part.offline:
                deleted += self.apply_retention(part)
        if deleted:
            self._try_checkpoint()  # a restart must not find the old start
        return deleted

    def apply_retention(self, part: Partition) -> int:
        """Delete what retention allows of one log (broker.log.retention's rules); segments deleted."""
        config = part.log_config or self._default_log_config
        try:
            plan = plan_deletion(part.log.segment_stats(), part.high_watermark, part.log.log_start_offset,
                                 config.retention, self.wall_clock)
            if not plan.count:
                return 0
            old_start = part.log.log_start_offset
            gone = part.log.delete_oldest_segments(plan.count)
            start = part.log.log_start_offset
            part.epochs.truncate_from_start(start)
            if part.producers is not None:
                part.producers.log_start_advanced(start)
        except KafkaStorageError as e:
            self.fail_dir("retention", e)
            return 0
        self.segments_deleted.inc(len(gone))
        log.info("log.segments_deleted", topic=part.topic, partition=part.index, segments=len(gone),
                 reasons=",".join(f"{r}:{n}" for r, n in plan.reasons), old_log_start_offset=old_start,
                 log_start_offset=start)
        try:
            asyncio.get_running_loop().call_later(config.file_delete_delay_ms / 1000, self._finish_delete, part, gone)
        except RuntimeError:  # no event loop (a unit test): delete at once
            self._finish_delete(part, gone)
        return len(gone)

    def _finish_delete(self, part: Partition, gone: list[Segment]) -> None:
        try:
            part.log.finish_delete(gone)
        except OSError as e:
            self.fail_dir("delete segments", e)

    def _producers_truncated(self, part: Partition) -> None:
        if part.producers is not None:
            part.producers.truncated(self.wall_clock())

    async def _producer_expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_S)
            self.remove_expired_producers()

    def remove_expired_producers(self) -> None:
        now = self.wall_clock()
        for part in list(self.partitions.values()):
            if part.producers is not None and not part.offline:
                part.producers.remove_expired(now)

    def latest_epoch(self, tp: tuple[str, int]) -> int | None:
        """The latest leader epoch in a hosted partition's log; None without epochs."""
        part = self.partitions.get(tp)
        return None if part is None or part.offline else part.epochs.latest_epoch

    def end_offset_for_epoch(self, tp: tuple[str, int], epoch: int) -> tuple[int, int] | None:
        """This replica's own (epoch, end offset) for `epoch` (KIP-279's largest epoch <= it); None if unknown."""
        part = self.partitions.get(tp)
        if part is None or part.offline:
            return None
        found, end = part.epochs.end_offset_for(epoch, part.log_end_offset)
        return None if end == UNDEFINED_EPOCH_OFFSET else (found, end)

    def epoch_for_offset(self, part: Partition, offset: int) -> int:
        """The leader epoch that wrote `offset` (ListOffsets v4's leader_epoch); -1 if unknown."""
        found = part.epochs.epoch_for_offset(offset)
        return UNDEFINED_EPOCH if found is None else found

    def last_offset_for_leader_epoch(self, part: Partition, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[ErrorCode, int, int]:
        """OffsetForLeaderEpoch on a hosted partition: (error, epoch, end offset), Kafka's
        Partition.lastOffsetForLeaderEpoch with fetchOnlyFromLeader (current epoch -1: no fencing)."""
        if part.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if current_leader_epoch != -1:
            if part.leader_epoch > current_leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if part.leader_epoch < current_leader_epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if part.leader != self.broker_id:
            return ErrorCode.NOT_LEADER_FOR_PARTITION, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        epoch, end = part.epochs.end_offset_for(leader_epoch, part.log_end_offset)
        return ErrorCode.NONE, epoch, end

    # ---- fetch -----------------------------------------------------------------------

    def is_assigned_follower(self, part: Partition, replica_id: int) -> bool:
        """`replica_id` is one of the partition's replicas other than this leader (Kafka's getReplica)."""
        tracker = part.tracker
        return (tracker is not None and part.leader == self.broker_id and replica_id != self.broker_id
                and replica_id in part.replicas and replica_id in tracker.followers)

    def check_follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int) -> FollowerFetch:
        """Whether a follower fetch may move follower state, checked before anything is recorded.

        In Kafka's order (the log read's offset check comes first, then the replica check):
        an offset outside [log start, log end] is "out_of_range" (OFFSET_OUT_OF_RANGE); a
        replica id that is not an assigned follower of this leader is "not_assigned".
        """
        if not part.log.log_start_offset <= fetch_offset <= part.log_end_offset:
            return "out_of_range"
        if not self.is_assigned_follower(part, replica_id):
            return "not_assigned"
        return "ok"

    def follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int, *, record: bool,
                       now_ms: float) -> FollowerFetch:
        """check_follower_fetch, then, when `record` and the answer is "ok", record_follower_fetch
        at `now_ms`: the Fetch handler's one call per partition of a follower's fetch (most of
        them idle, in every round of replication), with one clock reading for the whole request."""
        log = part.log
        leo = log.log_end_offset
        if not log.log_start_offset <= fetch_offset <= leo:
            return "out_of_range"
        tracker = part.tracker
        if (tracker is None or part.leader != self.broker_id or replica_id == self.broker_id
                or replica_id not in part.replicas):
            return "not_assigned"
        progress = tracker.followers.get(replica_id)
        if progress is None:
            return "not_assigned"
        if record:
            if (fetch_offset == leo and progress.log_end_offset == leo and progress.last_fetch_leader_leo == leo
                    and replica_id in part.isr):
                # An in-sync follower at the log end again, nothing appended since its last fetch
                # (an idle partition, in every round of replication): all IsrTracker.on_fetch
                # changes is the clock, and nothing else can move (no ISR expansion, no high
                # watermark move). The same as _record_fetch, in a few attribute writes.
                if now_ms > progress.last_caught_up_ms:
                    progress.last_caught_up_ms = now_ms
                progress.last_fetch_ms = now_ms
            else:
                self._record_fetch(part, tracker, replica_id, progress.log_end_offset, fetch_offset, leo, now_ms)
        return "ok"

    def record_follower_fetch(self, part: Partition, follower: int, fetch_offset: int, *, checked: bool = False) -> bool:
        """Record an assigned follower's fetch offset (ISR, high watermark); False if refused, nothing changed.
        `checked`: the caller has had "ok" from check_follower_fetch for this very fetch."""
        if not checked and self.check_follower_fetch(part, follower, fetch_offset) != "ok":
            return False
        tracker = part.tracker
        if tracker is None:
            return False
        progress = tracker.followers.get(follower)
        was_at = progress.log_end_offset if progress is not None else None
        return self._record_fetch(part, tracker, follower, was_at, fetch_offset, part.log_end_offset, self.clock())

    def _record_fetch(self, part: Partition, tracker: IsrTracker, follower: int, was_at: int | None,
                      fetch_offset: int, leo: int, now_ms: float) -> bool:
        if not tracker.on_fetch(follower, fetch_offset, leo, now_ms):
            return False
        expanded = tracker.expand(part.isr, follower, part.high_watermark)
        if expanded:
            self._spawn_isr_change(part, part.isr + [follower], expand=True)
        # The high watermark is the ISR's lowest log end: a follower still where it was (an
        # idle partition, in every follower fetch) cannot move it; appends, ISR changes and
        # roles move it themselves.
        if expanded or fetch_offset != was_at:
            self._advance_hw(part)
        return True

    def read(self, part: Partition, offset: int, max_bytes: int, *, consumer: bool,
             min_one_message: bool, allow_partial: bool, whole_entries: bool = False) -> FileSlice:
        """A slice of the log (Log.read); KafkaStorageError (and the directory offline) on an I/O error."""
        try:
            return self._read(part, offset, max_bytes, consumer, min_one_message, allow_partial, whole_entries)
        except KafkaStorageError as e:
            self.fail_dir("read", e)
            raise

    def _read(self, part: Partition, offset: int, max_bytes: int, consumer: bool,
              min_one_message: bool, allow_partial: bool, whole_entries: bool) -> FileSlice:
        if consumer:
            if offset > part.high_watermark and offset <= part.log_end_offset:
                return part.log.read(part.log_end_offset, 0)
            return part.log.read(offset, max_bytes, max_offset=part.high_watermark,
                                 min_one_message=min_one_message, allow_partial=allow_partial,
                                 whole_entries=whole_entries)
        return part.log.read(offset, max_bytes, min_one_message=min_one_message, allow_partial=allow_partial,
                             whole_entries=whole_entries)

    # ---- ISR upkeep ------------------------------------------------------------------

    async def _isr_upkeep(self) -> None:
        interval = self.config.replica_lag_time_max_ms / 2000
        while True:
            await asyncio.sleep(min(interval, 2.5))
            try:
                self.shrink_isrs()
                await self._propagate_isr_changes()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("isr.upkeep_failed")

    def shrink_isrs(self) -> None:
        now = self.clock()
        for part in list(self.partitions.values()):
            if part.leader != self.broker_id or part.tracker is None:
                continue
            out = part.tracker.shrink(part.isr, part.log_end_offset, now)
            if out:
                self._spawn_isr_change(part, [b for b in part.isr if b not in out], expand=False)

    def _spawn_isr_change(self, part: Partition, new_isr: list[int], expand: bool) -> None:
        self._tasks.append(asyncio.create_task(self._change_isr(part, new_isr, expand)))
        self._tasks = [t for t in self._tasks if not t.done()]

    async def _change_isr(self, part: Partition, new_isr: list[int], expand: bool) -> None:
        lock = self._isr_locks.setdefault(part.key, asyncio.Lock())
        async with lock:
            if part.leader != self.broker_id:
                return
            # Re-check under the lock: another change may have landed first.
            if expand:
                added = [b for b in new_isr if b not in part.isr]
                if not added:
                    return
                new_isr = part.isr + added
            else:
                if set(new_isr) == set(part.isr):
                    return
                new_isr = [b for b in part.isr if b in new_isr]
            state = L.PartitionState(self.broker_id, part.leader_epoch, part.controller_epoch, new_isr)
            path = L.partition_state_path(part.topic, part.index)
            try:
                part.zk_version = await self.zk.set(path, state.encode(), version=part.zk_version)
            except BadVersionError:
                try:
                    data, version = await self.zk.get(path)
                    current = L.PartitionState.decode(data)
                except (NoNodeError, ValueError, KeyError):
                    return
                if current.leader != self.broker_id or current.leader_epoch != part.leader_epoch:
                    log.info("isr.update_skipped", topic=part.topic, partition=part.index,
                             reason="leadership changed")
                    return
                part.zk_version = version
                part.isr = list(current.isr)
                return
            old = part.isr
            part.isr = new_isr
            (self.isr_expands if expand else self.isr_shrinks).inc()
            log.info("isr.expanded" if expand else "isr.shrunk", topic=part.topic, partition=part.index,
                     old_isr=old, new_isr=new_isr)
            self._isr_changes.add(part.key)
            self._last_isr_change_ms = self.clock()
            self._advance_hw(part)
            self.wake(part.key)

    async def _propagate_isr_changes(self, force: bool = False) -> None:
        now = self.clock()
        if not self._isr_changes:
            return
        if not (force or now - self._last_isr_change_ms > 5000 or now - self._last_isr_propagation_ms > 60000):
            return
        changes = sorted(self._isr_changes)
        self._isr_changes.clear()
        body = L.dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in changes]})
        await self.zk.create(f"{L.ISR_CHANGE}/isr_change_", body, sequential=True)
        self._last_isr_propagation_ms = now

    def sum_replica_lag(self) -> int:
        total = 0
        for part in self.partitions.values():
            if part.tracker is None:
                continue
            for st in part.tracker.followers.values():
                total += max(0, part.log_end_offset - st.log_end_offset)
        return total


def _close_partition(part: Partition) -> KafkaStorageError | None:
    """One partition's shutdown (a worker thread of ReplicaManager.stop): its error, if any."""
    if part.offline:
        part.log.abandon()  # no clean-shutdown marker in a failed directory
        return None
    try:
        if part.producers is not None:
            part.producers.close(sync=False)  # a snapshot at the log end: the next start reads no log
        part.log.close(durable=False)
    except KafkaStorageError as e:
        return e
    return None


async def _in_chunks(loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor, fn: Callable[[_T], _R],
                     items: list[_T]) -> list[_R]:
    """`[fn(item) for item in items]` on the pool's threads, _CHUNK items a job, in order."""
    def run(chunk: list[_T]) -> list[_R]:
        return [fn(item) for item in chunk]
    chunks = await asyncio.gather(*(loop.run_in_executor(pool, run, items[i:i + _CHUNK])
                                    for i in range(0, len(items), _CHUNK)))
    return [result for chunk in chunks for result in chunk]


def _write_marker(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))


def _mark_clean(part: Partition) -> KafkaStorageError | None:
    try:
        part.log.mark_clean_shutdown()
    except KafkaStorageError as e:
        return e
    return None


def _write_checkpoint(path: Path, rows: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("0\n" + f"{len(rows)}\n" + "".join(r + "\n" for r in rows))
    tmp.replace(path)


__all__ = ["FollowerFetch", "KeyedSignal", "OffsetOutOfRange", "Partition", "ReplicaManager"]
