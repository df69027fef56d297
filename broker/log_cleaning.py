"""The log cleaner wired to this broker: its settings, the hosted logs it sees, its metrics.

broker.log.cleaner knows logs only; this module turns the replica manager's partitions and the
topic config cache into its `CleanerLog` rows, each topic's keys falling back to the broker's
(Kafka's LogConfig: `cleanup.policy` <- `log.cleanup.policy`, `min.cleanable.dirty.ratio` <-
`log.cleaner.min.cleanable.ratio`, `min.compaction.lag.ms`, `max.compaction.lag.ms` and
`delete.retention.ms` <- their `log.cleaner.*` keys, `segment.bytes` <- `log.segment.bytes`,
`file.delete.delay.ms` <- `log.segment.delete.delay.ms`).
Topic keys are read on every scheduling pass, so a change through `/config/topics/<t>` applies
from the next pass.
"""

from __future__ import annotations

from collections.abc import Container, Mapping

import structlog

from broker.config import BrokerConfig
from broker.log.cleaner.manager import CleanerLog, CleanerSettings, LogCleaner
from broker.log.cleaner.rules import CompactionConfig
from broker.metrics import Registry
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.zk.config_entities import CLEANER_IO_RATE, DEFAULT_ENTITY
from broker.zk.topic_configs import TopicConfigs

log = structlog.get_logger()


def settings(config: BrokerConfig) -> CleanerSettings:
    return CleanerSettings(config.log_cleaner_enable, config.log_cleaner_threads,
                           config.log_cleaner_io_max_bytes_per_second, config.log_cleaner_dedupe_buffer_size,
                           config.log_cleaner_backoff_ms)


def compaction_config(topic: str, cfg: Mapping[str, str], broker: BrokerConfig) -> CompactionConfig:
    """A topic's cleaner settings: its own keys, else the broker's (values were validated when written)."""
    def num(key: str, default: float) -> float:
        try:
            return float(cfg[key]) if key in cfg else default
        except ValueError:
            log.warning("topic.bad_config", topic=topic, key=key)
            return default

    policy = cfg.get("cleanup.policy", broker.log_cleanup_policy)
    return CompactionConfig(
        compact="compact" in [p.strip() for p in policy.split(",")],
        min_cleanable_ratio=num("min.cleanable.dirty.ratio", broker.log_cleaner_min_cleanable_ratio),
        min_compaction_lag_ms=int(num("min.compaction.lag.ms", broker.log_cleaner_min_compaction_lag_ms)),
        max_compaction_lag_ms=int(num("max.compaction.lag.ms", broker.log_cleaner_max_compaction_lag_ms)),
        delete_retention_ms=int(num("delete.retention.ms", broker.log_cleaner_delete_retention_ms)),
        segment_bytes=int(num("segment.bytes", broker.log_segment_bytes)),
        file_delete_delay_ms=int(num("file.delete.delay.ms", broker.log_segment_delete_delay_ms)))


def _producer_last_offsets(part: Partition) -> Container[tuple[int, int]]:
    if part.producers is None:
        return frozenset()
    return frozenset((pid, entry.last_offset) for pid, entry in part.producers.states.producers.items()
                     if entry.last_offset >= 0)


class CleanerRate:
    """log.cleaner.io.max.bytes.per.second as Kafka 2.8 resolves a dynamic broker key: this broker's
    `/config/brokers/<id>`, else `/config/brokers/<default>`, else server.properties."""

    def __init__(self, config: BrokerConfig, cleaner: LogCleaner) -> None:
        self.broker_id = str(config.broker_id)
        self.static = config.log_cleaner_io_max_bytes_per_second
        self.cleaner = cleaner
        self.dynamic: dict[str, float] = {}

    def on_broker_config(self, name: str, config: Mapping[str, str]) -> None:
        if name not in (self.broker_id, DEFAULT_ENTITY):
            return
        try:
            value = float(config[CLEANER_IO_RATE]) if CLEANER_IO_RATE in config else None
        except ValueError:
            log.warning("broker.bad_config", key=CLEANER_IO_RATE)
            value = None
        if value is None:
            self.dynamic.pop(name, None)
        else:
            self.dynamic[name] = value
        rate = self.dynamic.get(self.broker_id, self.dynamic.get(DEFAULT_ENTITY, self.static))
        if rate != self.cleaner.throttle.configured:
            self.cleaner.throttle.set_rate(rate)
            log.info("cleaner.io_rate", bytes_per_second=self.cleaner.throttle.rate)


def build(config: BrokerConfig, replicas: ReplicaManager, topic_configs: TopicConfigs,
          metrics: Registry) -> LogCleaner:
    read = metrics.counter("log_cleaner_bytes_read_total", "Bytes the log cleaner read from segments")
    written = metrics.counter("log_cleaner_bytes_written_total", "Bytes the log cleaner wrote to cleaned segments")
    read.inc(0)  # both series exist (at 0) before the first pass
    written.inc(0)

    async def rows() -> list[CleanerLog]:
        out = []
        # One CompactionConfig a topic a pass, not one a partition: every pass (each back-off)
        # built 10,000 of them for 10,000 partitions, ~1 s of the event loop (py-spy of a create).
        resolved: dict[str, tuple[Mapping[str, str], CompactionConfig]] = {}
        for part in list(replicas.partitions.values()):
            if part.offline:
                continue
            cfg = await topic_configs.get(part.topic)
            memo = resolved.get(part.topic)
            if memo is None or (memo[0] is not cfg and memo[0] != cfg):
                memo = resolved[part.topic] = (cfg, compaction_config(part.topic, cfg, config))
            out.append(CleanerLog(part.topic, part.index, part.log, part.high_watermark, memo[1],
                                  lambda p=part: _producer_last_offsets(p)))  # type: ignore[misc]
        return out

    cleaner = LogCleaner(settings(config), replicas.log_dir, rows, on_read=lambda n: read.inc(n),
                         on_written=lambda n: written.inc(n))
    metrics.gauge("log_cleaner_max_dirty_ratio",
                  "Largest dirty ratio among compacted logs at the cleaner's last look (Kafka's max-dirty-percent / 100)",
                  lambda: [({}, cleaner.max_dirty_ratio)])
    metrics.gauge("log_cleaner_io_bytes_per_second", "Cleaner I/O rate as its throttle measures it (KIP-73 rate)",
                  lambda: [({}, cleaner.throttle.measured())])
    return cleaner
