"""A topic's effective log settings (Kafka's LogConfig): its `/config/topics/<t>` overrides over the
broker's keys over Kafka 2.8's defaults, for the keys retention and rolling read.

Pure. A value in the znode that does not parse (written by something other than `minibroker
configs`, which refuses it) is logged and the broker's value used, as Kafka's topic config
handler keeps running on the broker defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from broker.config import BrokerConfig
from broker.log.retention import RetentionPolicy
from broker.zk.config_entities import TOPIC_KEYS, InvalidConfig, cleanup_includes_delete

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int
    segment_ms: int
    file_delete_delay_ms: int
    cleanup_policy: str
    retention: RetentionPolicy


def log_config(topic: str, cfg: Mapping[str, str], broker: BrokerConfig) -> LogConfig:
    def value(key: str, default: object) -> object:
        raw = cfg.get(key)
        if raw is None:
            return default
        try:
            return TOPIC_KEYS[key](key, raw)
        except InvalidConfig as e:
            log.warning("topic.bad_config", topic=topic, key=key, error=str(e))
            return default

    policy = str(value("cleanup.policy", broker.log_cleanup_policy))
    retention_ms = int(str(value("retention.ms", broker.log_retention_time_ms)))
    return LogConfig(
        segment_bytes=int(str(value("segment.bytes", broker.log_segment_bytes))),
        segment_ms=int(str(value("segment.ms", broker.log_roll_time_ms))),
        file_delete_delay_ms=int(str(value("file.delete.delay.ms", broker.log_segment_delete_delay_ms))),
        cleanup_policy=policy,
        retention=RetentionPolicy(retention_ms=-1 if retention_ms < 0 else retention_ms,
                                  retention_bytes=int(str(value("retention.bytes", broker.log_retention_bytes))),
                                  delete=cleanup_includes_delete(policy)),
    )
