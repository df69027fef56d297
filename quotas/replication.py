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
cover bytes asked for but not yet received, so concurrent fetchers share one budget. Besides
the window, a token bucket of SHORT_BURST_SECONDS of the quota spreads the grants evenly,
also after the quota is raised.
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
# The short bound: a token bucket refilled at the quota and holding at most this many seconds
# of it. It keeps a raised quota from releasing the window's unused headroom at once, and
# spreads the grants evenly: a bound over the last few samples let a whole span's worth go as
# soon as a burst aged out, and the rate after a raise swung between 0.3 and 2.3 T.
SHORT_BURST_SECONDS = 1.0


class _AllPartitions(frozenset):  # type: ignore[type-arg]
    """The `*` replica list: every partition of the topic."""

    def __contains__(self, item: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL_PARTITIONS"


ALL_PARTITIONS: frozenset[int] = _AllPartitions()


_NONE: frozenset[int] = frozenset()


class ReplicationQuotaManager:
    def __init__(self, samples: int, window_seconds: float, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.rate = SimpleRate(samples, window_seconds)
        self.quota: float | None = None
        self.throttled: dict[str, frozenset[int]] = {}
        self.reserved = 0.0
        self._credit: float | None = None  # the short bound's bucket; None until a quota is set
        self._credit_ms = 0.0

    def _refill(self, now_ms: float) -> float:
        if self.quota is None:
            self._credit = None
            return float("inf")
        cap = self.quota * SHORT_BURST_SECONDS
        if self._credit is None:
            self._credit = cap
        else:
            self._credit = min(cap, self._credit + self.quota * max(0.0, now_ms - self._credit_ms) / 1000)
        self._credit_ms = now_ms
        return self._credit

    def update_quota(self, bytes_per_second: float | None) -> None:
        # Credit earned so far was earned at the old rate; the new one applies from now.
        if self.quota is not None:
            self._refill(self.clock())
        self.quota = bytes_per_second
        if bytes_per_second is None:
            self._credit = None
        elif self._credit is not None:
            self._credit = min(self._credit, bytes_per_second * SHORT_BURST_SECONDS)

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

    def throttled_partitions(self, topic: str) -> frozenset[int]:
        """The topic's throttled partitions (`in` it is is_throttled): looked up once per topic of
        a fetch rather than once per partition."""
        return self.throttled.get(topic, _NONE)

    def is_quota_exceeded(self) -> bool:
        if self.quota is None:
            return False
        return exceeds(self.rate.measure(self.clock()), self.quota)

    def record(self, nbytes: int) -> None:
        now = self.clock()
        self.rate.record(nbytes, now)
        if self.quota is not None:
            self._refill(now)
            assert self._credit is not None
            self._credit -= nbytes

    def allowance(self) -> float:
        """Bytes that can be added now without the measured rate going over the quota.

        Three bounds: the quota over the whole window (Kafka's rate), the short bound's bucket
        (SHORT_BURST_SECONDS), and MAX_BURST_SECONDS of the quota for any one fetch.
        """
        if self.quota is None:
            return float("inf")
        now = self.clock()
        stat = self.rate.stat
        window_s = self.rate.window_ms(now) / 1000
        headroom = self.quota * window_s - stat.total(now)
        short = self._refill(now)
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
