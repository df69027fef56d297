"""Warns about replication throttles left in force after a reassignment ended.

Operators' most common KIP-73 mistake: nobody ran `reassign --verify`, so the throttle
stays, and weeks later a broker returning from downtime catches up at the old move's rate.
A throttle "remains" when this broker has a rate and throttled replicas on the same side
(only then does it act) while `/admin/reassign_partitions` has been absent for longer than
`replication.throttle.leftover.warn.ms`. The warning repeats once per that period while the
condition lasts. LeftoverThrottleWatch is pure logic on an injected clock;
watch_leftover_throttles feeds it what this broker sees and logs the warning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from broker.replication.throttles import ReplicationThrottles
from broker.zk import layout as L
from broker.zk.client import ZkClient

log = structlog.get_logger()


class LeftoverThrottleWatch:
    def __init__(self, grace_ms: float, now_ms: float) -> None:
        self.grace_ms = grace_ms
        self._idle_since: float | None = now_ms  # when no reassignment was last seen running
        self._warned_at: float | None = None

    def observe(self, throttling: bool, reassigning: bool, now_ms: float) -> bool:
        """True when a warning is due now."""
        if reassigning:
            self._idle_since = None
            self._warned_at = None
            return False
        if self._idle_since is None:
            self._idle_since = now_ms
        if not throttling:
            self._warned_at = None
            return False
        if now_ms - self._idle_since < self.grace_ms:
            return False
        if self._warned_at is not None and now_ms - self._warned_at < self.grace_ms:
            return False
        self._warned_at = now_ms
        return True

    def idle_ms(self, now_ms: float) -> float:
        return 0.0 if self._idle_since is None else now_ms - self._idle_since


async def watch_leftover_throttles(throttles: ReplicationThrottles, zk: ZkClient, grace_ms: float,
                                   now_ms: Callable[[], float]) -> None:
    """Runs until cancelled: warns (`throttle.leftover`) about throttles no reassignment needs."""
    watch = LeftoverThrottleWatch(grace_ms, now_ms())
    while True:
        await asyncio.sleep(min(grace_ms / 4000, 30))
        acting = throttles.acting()
        try:
            reassigning = bool(acting) and await zk.exists(L.REASSIGN)
        except Exception:
            continue  # ZooKeeper away: judge again on the next round
        if watch.observe(bool(acting), reassigning, now_ms()):
            log.warning("throttle.leftover", idle_s=round(watch.idle_ms(now_ms()) / 1000),
                        leader_rate=throttles.leader.quota, follower_rate=throttles.follower.quota,
                        topics=acting,
                        hint="no reassignment is running: run `minibroker reassign --verify` for the last "
                             "move, or remove the rates and replica lists with `minibroker configs`")
