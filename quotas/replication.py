"""KIP-73 replication quota manager: one for the leader side, one for the follower side.

A quota manager starts with no quota, so nothing is throttled until a rate is set.
`record` always counts (in-sync replicas' bytes too, KAFKA-4313), and the check is
separate: the leader drops throttled, out-of-sync partitions from its responses while the
measured SimpleRate is above the bound; the follower leaves them out of its requests.
Changing the rate keeps the samples, as Kafka does. Time comes from the injected clock
(milliseconds).

Departure from Kafka 0.10.1, for accuracy: besides the on/off check, `allowance()` says how
many more bytes fit under the bound right now (bound × window − recorded − reserved). The
leader caps a response's throttled bytes to it and the follower caps what it asks for, so a
10 MB fetch response cannot overshoot a 1 MB/s quota by ten seconds' worth. Reservations
cover bytes asked for but not yet received, so concurrent fetchers share one budget.
"""

from __future__ import annotations

from collections.abc import Callable

from quotas.rate import SimpleRate, exceeds

# The most one fetch may move at once, in seconds of the quota: small enough for a smooth
# rate, large enough that a fetch still carries a useful amount at low rates.
MAX_BURST_SECONDS = 0.5
# The least a leader hands a throttled partition: below it, the partition waits for the budget
# to refill. Handing out every crumb as it accrues makes leader and follower ping-pong requests
# of a few hundred bytes, whose overhead (not the quota) then sets the rate: 0.8 T was measured.
MIN_GRANT_SECONDS = 0.005
MIN_GRANT_BYTES = 16 * 1024
# How many recent samples bound a burst after the quota is raised.
SHORT_HORIZON_SAMPLES = 3
# Fetch round trips leave gaps the short bound cannot refill; 5% over it recovers them, and the
# whole-window bound still holds the mean to the quota.
SHORT_SLACK = 1.05


class _AllPartitions(frozenset):  # type: ignore[type-arg]
    """The `*` replica list: every partition of the topic."""

    def __contains__(self, item: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL_PARTITIONS"


ALL_PARTITIONS: frozenset[int] = _AllPartitions()


class ReplicationQuotaManager:
    def __init__(self, samples: int, window_seconds: float, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.rate = SimpleRate(samples, window_seconds)
        self.quota: float | None = None
        self.throttled: dict[str, frozenset[int]] = {}
        self.reserved = 0.0

    def update_quota(self, bytes_per_second: float | None) -> None:
        self.quota = bytes_per_second

    def mark_throttled(self, topic: str, partitions: frozenset[int] | set[int] | None) -> None:
        if partitions is None or (not partitions and partitions is not ALL_PARTITIONS):
            self.throttled.pop(topic, None)
        else:
            self.throttled[topic] = partitions if partitions is ALL_PARTITIONS else frozenset(partitions)

    def remove_topic(self, topic: str) -> None:
        self.throttled.pop(topic, None)

    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self.throttled.get(topic)
        return parts is not None and partition in parts

    def is_quota_exceeded(self) -> bool:
        if self.quota is None:
            return False
        return exceeds(self.rate.measure(self.clock()), self.quota)

    def record(self, nbytes: int) -> None:
        self.rate.record(nbytes, self.clock())

    def allowance(self) -> float:
        """Bytes that can be added now without the measured rate going over the quota.

        Three bounds: the quota over the whole window (Kafka's rate), the quota over the last
        sample or two (so that raising the quota does not release the window's unused headroom
        in one burst), and MAX_BURST_SECONDS of the quota for any one fetch.
        """
        if self.quota is None:
            return float("inf")
        now = self.clock()
        stat = self.rate.stat
        window_s = self.rate.window_ms(now) / 1000
        headroom = self.quota * window_s - stat.total(now)
        recent, span_ms = stat.recent(now, SHORT_HORIZON_SAMPLES * stat.window_ms)
        short = self.quota * SHORT_SLACK * max(span_ms, stat.window_ms) / 1000 - recent
        return max(0.0, min(headroom, short, self.quota * MAX_BURST_SECONDS) - self.reserved)

    def min_grant(self) -> float:
        """The smallest throttled read worth answering now (see MIN_GRANT_SECONDS)."""
        if self.quota is None:
            return 0.0
        return max(MIN_GRANT_BYTES, self.quota * MIN_GRANT_SECONDS)

    def reserve(self, nbytes: float) -> None:
        self.reserved += nbytes

    def release(self, nbytes: float) -> None:
        self.reserved = max(0.0, self.reserved - nbytes)

    def measured_rate(self) -> float:
        return self.rate.measure(self.clock())
