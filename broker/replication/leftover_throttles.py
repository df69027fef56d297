"""Warns about replication throttles left in force after a reassignment ended.

Operators' most common KIP-73 mistake: nobody ran `reassign --verify`, so the throttle
stays, and weeks later a broker returning from downtime catches up at the old move's rate.
A throttle "remains" when this broker has a rate and throttled replicas on the same side
(only then does it act) while `/admin/reassign_partitions` has been absent for longer than
`replication.throttle.leftover.warn.ms`. The warning repeats once per that period while the
condition lasts. Pure logic on an injected clock; the broker feeds it what it sees.
"""

from __future__ import annotations


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
