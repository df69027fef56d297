"""Owns the replica fetchers of this broker and is their `ReplicaSink`.

As a sink it only forwards: appends, truncation and restarts are ReplicaManager's, the one
owner of partition state.

Partitions are spread over `num.replica.fetchers` fetchers per source broker by a hash
of the topic-partition, as Kafka's AbstractFetcherManager does.
"""

from __future__ import annotations

import asyncio
import zlib

import structlog

from broker.config import BrokerConfig
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.zk.layout import BrokerInfo
from fetcher.replica_fetcher import FetcherSettings, FetchThrottle, ReplicaFetcher
from fetcher.security import PLAINTEXT, ClientSecurity

log = structlog.get_logger()
TP = tuple[str, int]


class FetcherManager:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, throttle: FetchThrottle | None = None,
                 lag: dict[TP, int] | None = None, security: ClientSecurity | None = None) -> None:
        self.config = config
        self.lag = lag
        self.replicas = replicas
        self.throttle = throttle
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.assigned: dict[TP, tuple[int, int]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self.settings = FetcherSettings(
            replica_id=config.broker_id, max_wait_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes, response_max_bytes=config.replica_fetch_response_max_bytes,
            partition_max_bytes=config.replica_fetch_max_bytes, backoff_ms=config.replica_fetch_backoff_ms,
            security=security or PLAINTEXT)

    # ReplicaSink -------------------------------------------------------------------------

    def _part(self, tp: TP) -> Partition | None:
        return self.replicas.get(*tp)

    def log_end_offset(self, tp: TP) -> int | None:
        part = self.replicas.partitions.get(tp)
        return None if part is None else part.log.log_end_offset

    def log_end_offsets(self, tps: list[TP]) -> list[int | None]:
        # One call for a whole request's partitions: a replica fetcher asks this of every
        # partition it fetches, every round of replication.
        get = self.replicas.partitions.get
        return [None if (part := get(tp)) is None else part.log.log_end_offset for tp in tps]

    def append(self, tp: TP, records: bytes | memoryview, leader_hw: int) -> int:
        part = self.replicas.partitions.get(tp)
        if part is None:
            return 0
        n = self.replicas.append_as_follower(part, records, leader_hw)
        if self.lag is not None:
            self.lag[tp] = leader_hw - part.log_end_offset
        return n

    def truncate_to(self, tp: TP, offset: int) -> None:
        self.replicas.truncate_follower(tp, offset)

    def restart_at(self, tp: TP, offset: int) -> None:
        self.replicas.restart_follower_at(tp, offset)

    def latest_epoch(self, tp: TP) -> int | None:
        return self.replicas.latest_epoch(tp)

    def current_leader_epoch(self, tp: TP) -> int | None:
        part = self._part(tp)
        return None if part is None else part.leader_epoch

    def end_offset_for_epoch(self, tp: TP, epoch: int) -> tuple[int, int] | None:
        return self.replicas.end_offset_for_epoch(tp, epoch)

    def high_watermark(self, tp: TP) -> int | None:
        part = self._part(tp)
        return None if part is None else part.high_watermark

    # assignment ---------------------------------------------------------------------------

    def add(self, part: Partition, leader: BrokerInfo) -> None:
        tp = part.key
        fetcher_id = zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self.config.num_replica_fetchers
        key = (leader.broker_id, fetcher_id)
        current = self.assigned.get(tp)
        if current is not None and current != key:
            self.remove(tp)
        fetcher = self.fetchers.get(key)
        if fetcher is not None and (fetcher.host, fetcher.port) != (leader.host, leader.port):
            for other in [t for t, k in self.assigned.items() if k == key]:
                self.assigned.pop(other)
            self.fetchers.pop(key)
            self._stopping.add(asyncio.create_task(fetcher.stop()))
            fetcher = None
        if fetcher is None:
            fetcher = ReplicaFetcher(leader.host, leader.port, leader.broker_id, self.settings, self, self.throttle)
            fetcher.start()
            self.fetchers[key] = fetcher
            log.info("fetcher.started", source=leader.broker_id, fetcher_id=fetcher_id)
        fetcher.add(tp)
        self.assigned[tp] = key

    def remove(self, tp: TP) -> None:
        if self.lag is not None:
            self.lag.pop(tp, None)
        key = self.assigned.pop(tp, None)
        if key is not None and key in self.fetchers:
            self.fetchers[key].remove(tp)

    async def stop(self) -> None:
        for f in self.fetchers.values():
            await f.stop()
        self.fetchers.clear()
        self.assigned.clear()
