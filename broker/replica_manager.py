"""Partitions hosted on this broker: their logs, roles, high watermarks, and the waits on them.

The produce path validates and assigns offsets (protocol.records), appends bytes, and
advances the high watermark; the fetch path hands out log slices as bytes. Both
purgatories (acks=all produce, long-poll fetch) wait on one append/high-watermark
signal instead of per-request timers.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from broker.config import BrokerConfig
from broker.log import FileSlice, Log, OffsetOutOfRange
from protocol.errors import ErrorCode
from protocol.records.errors import RecordsError
from protocol.records.message_set import AppendInfo, validate_and_assign

log = structlog.get_logger()


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    replicas: list[int]
    leader: int = -1
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    high_watermark: int = 0
    min_insync_replicas: int = 1

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset


class Signal:
    """A level-triggered broadcast: waiters wake on the next `fire()` after they started waiting."""

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None

    def fire(self) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)
        self._fut = None

    async def wait(self, timeout: float) -> None:
        if self._fut is None:
            self._fut = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._fut), timeout)
        except TimeoutError:
            pass


class ReplicaManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.log_dir: Path = config.log_dirs[0]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.appended = Signal()  # fires on every append and high-watermark move

    # ---- lifecycle -------------------------------------------------------------------

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def make_leader(self, topic: str, index: int, replicas: list[int], leader_epoch: int,
                    isr: list[int], min_isr: int, segment_bytes: int | None = None) -> Partition:
        part = self.partitions.get((topic, index))
        if part is None:
            plog = Log.open(self.log_dir / f"{topic}-{index}",
                            segment_bytes=segment_bytes or self.config.log_segment_bytes)
            part = Partition(topic, index, plog, replicas)
            self.partitions[(topic, index)] = part
            log.info("partition.opened", topic=topic, partition=index, log_end_offset=plog.log_end_offset)
        part.replicas = list(replicas)
        part.leader = self.broker_id
        part.leader_epoch = leader_epoch
        part.isr = list(isr)
        part.min_insync_replicas = min_isr
        self._maybe_advance_hw(part)
        return part

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            part = self.partitions.pop(key)
            part.log.delete()
            log.info("partition.deleted", topic=topic, partition=key[1])
        for leftover in self.log_dir.glob(f"{topic}-*"):
            suffix = leftover.name[len(topic) + 1:]
            if suffix.isdigit():
                shutil.rmtree(leftover, ignore_errors=True)

    def close(self) -> None:
        for part in self.partitions.values():
            part.log.close()

    # ---- produce ---------------------------------------------------------------------

    def _maybe_advance_hw(self, part: Partition) -> None:
        # With this broker alone in the ISR the high watermark is its own log end;
        # followers' fetch offsets move it otherwise (the cluster issue).
        if part.isr == [self.broker_id] or not part.isr:
            new_hw = part.log_end_offset
            if new_hw != part.high_watermark:
                part.high_watermark = new_hw
                self.appended.fire()

    def append(self, part: Partition, data: memoryview | bytes, acks: int) -> tuple[ErrorCode, int, AppendInfo | None]:
        if acks == -1 and len(part.isr) < part.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS, -1, None
        if len(data) > part.log.segment_bytes:
            # Kafka's rule: a set that cannot fit in one segment can never be appended.
            return ErrorCode.RECORD_LIST_TOO_LARGE, -1, None
        try:
            info = validate_and_assign(data, part.log_end_offset, int(time.time() * 1000))
        except RecordsError as e:
            log.warning("produce.invalid_records", topic=part.topic, partition=part.index, error_code=e.error_code)
            return ErrorCode(e.error_code), -1, None
        part.log.append(info.buffer, info.last_offset)
        self._maybe_advance_hw(part)
        self.appended.fire()
        return ErrorCode.NONE, info.first_offset, info

    async def wait_for_hw(self, part: Partition, offset: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while part.high_watermark < offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self.appended.wait(remaining)
        return True

    # ---- fetch -----------------------------------------------------------------------

    def read(self, part: Partition, offset: int, max_bytes: int, *, consumer: bool,
             min_one_message: bool, allow_partial: bool) -> FileSlice:
        max_offset = part.high_watermark if consumer else None
        if consumer and offset > part.high_watermark and offset <= part.log_end_offset:
            # Between the high watermark and the log end: not yet committed, not out of range.
            return part.log.read(part.log_end_offset, 0)
        try:
            return part.log.read(offset, max_bytes, max_offset=max_offset,
                                 min_one_message=min_one_message, allow_partial=allow_partial)
        except OffsetOutOfRange:
            raise


__all__ = ["OffsetOutOfRange", "Partition", "ReplicaManager", "Signal"]
