"""KIP-73 on this broker: the two replication quota managers and what feeds them.

Rates come from `/config/brokers/<id>`, falling back to `/config/brokers/<default>`, then
unlimited (Kafka before 3.9 ignored `<default>`, KAFKA-10190; this project honours it).
Replica lists come from each topic's `leader.replication.throttled.replicas` and
`follower.replication.throttled.replicas`, filtered on this broker's id. Operators asked
to see what is really in force, so every change logs the effective throttle, and a
rate without lists (or lists without a rate) is warned about: either alone does nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.zk.config_entities import (
    DEFAULT_ENTITY,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    throttled_partitions,
)
from quotas.replication import ReplicationQuotaManager

log = structlog.get_logger()
TP = tuple[str, int]


class ReplicationThrottles:
    def __init__(self, broker_id: int, samples: int, window_seconds: int, clock: Callable[[], float]) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuotaManager(samples, window_seconds, clock)
        self.follower = ReplicationQuotaManager(samples, window_seconds, clock)
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.topic_lists: dict[str, tuple[str | None, str | None]] = {}
        # Per-partition lag as last seen by this broker's fetchers (leader HW - own LEO).
        self.follower_lag: dict[TP, int] = {}

    # ---- dynamic config handlers -----------------------------------------------------

    def _rate(self, key: str) -> float | None:
        own = self.broker_configs.get(str(self.broker_id), {})
        default = self.broker_configs.get(DEFAULT_ENTITY, {})
        raw = own.get(key, default.get(key))
        return None if raw is None else float(raw)

    def on_broker_config(self, name: str, config: dict[str, str]) -> None:
        if name not in (str(self.broker_id), DEFAULT_ENTITY):
            return
        self.broker_configs[name] = config
        self.leader.update_quota(self._rate(LEADER_RATE))
        self.follower.update_quota(self._rate(FOLLOWER_RATE))
        self.report()

    def on_topic_config(self, topic: str, config: dict[str, str]) -> None:
        leader_list, follower_list = config.get(LEADER_REPLICAS), config.get(FOLLOWER_REPLICAS)
        if (leader_list, follower_list) == self.topic_lists.get(topic, (None, None)):
            return
        self.topic_lists[topic] = (leader_list, follower_list)
        self.leader.mark_throttled(topic, throttled_partitions(leader_list, self.broker_id))
        self.follower.mark_throttled(topic, throttled_partitions(follower_list, self.broker_id))
        self.report()

    def remove_topic(self, topic: str) -> None:
        self.topic_lists.pop(topic, None)
        self.leader.remove_topic(topic)
        self.follower.remove_topic(topic)

    def report(self) -> None:
        log.info("throttle.in_force", leader_rate=self.leader.quota, follower_rate=self.follower.quota,
                 leader_throttled_topics=sorted(self.leader.throttled),
                 follower_throttled_topics=sorted(self.follower.throttled))
        for side, q in (("leader", self.leader), ("follower", self.follower)):
            if q.quota is not None and not q.throttled:
                log.warning("throttle.rate_without_replicas", side=side, rate=q.quota,
                            hint=f"set {side}.replication.throttled.replicas on the topics to throttle")
            if q.quota is None and q.throttled:
                log.warning("throttle.replicas_without_rate", side=side, topics=sorted(q.throttled),
                            hint=f"set {side}.replication.throttled.rate on this broker")

    def acting(self) -> dict[str, list[str]]:
        """Per side, the topics throttled here while a rate is also set: the throttles that act."""
        return {side: sorted(q.throttled) for side, q in (("leader", self.leader), ("follower", self.follower))
                if q.quota is not None and q.throttled}

    # ---- follower side (fetcher.replica_fetcher.FetchThrottle) -----------------------

    def any_throttled(self) -> bool:
        """Whether any partition is on the follower's throttled list (else none is `limited`)."""
        return bool(self.follower.throttled)

    def leave_out(self, tp: TP) -> bool:
        return self.limited(tp) and self.follower.is_quota_exceeded()

    def limited(self, tp: TP) -> bool:
        """Throttled and not in sync: its fetches count against the follower budget."""
        in_sync = self.follower_lag.get(tp, 1) <= 0
        return self.follower.is_throttled(*tp) and not in_sync

    def budget(self) -> float:
        return self.follower.allowance()

    def reserve(self, nbytes: int) -> None:
        self.follower.reserve(nbytes)

    def release(self, nbytes: int) -> None:
        self.follower.release(nbytes)

    def record(self, tp: TP, nbytes: int) -> None:
        if self.follower.is_throttled(*tp):
            self.follower.record(nbytes)
