"""Kafka's TokenBucket (KIP-599), counted in partition mutations.

burst = samples * window_seconds * quota. Tokens refill at `quota` per second up to the
burst; recording subtracts and may go negative, which is how a request larger than the
remaining credit is admitted once and then paid back as throttle time
(-tokens / quota seconds). The bucket starts full. Time is passed in, in milliseconds.
"""

from __future__ import annotations


class TokenBucket:
    __slots__ = ("quota", "samples", "window_seconds", "tokens", "last_ms")

    def __init__(self, quota_per_second: float, samples: int, window_seconds: float) -> None:
        self.quota = quota_per_second
        self.samples = samples
        self.window_seconds = window_seconds
        self.tokens: float | None = None
        self.last_ms = 0.0

    @property
    def burst(self) -> float:
        return self.samples * self.window_seconds * self.quota

    def set_quota(self, quota_per_second: float, now_ms: float) -> None:
        """Change the rate in place; credit earned so far at the old rate is kept."""
        self._refill(now_ms)
        self.quota = quota_per_second
        if self.tokens is not None:
            self.tokens = min(self.tokens, self.burst)

    def _refill(self, now_ms: float) -> None:
        if self.tokens is None:
            self.tokens = self.burst
        else:
            elapsed = max(0.0, now_ms - self.last_ms)
            self.tokens = min(self.burst, self.tokens + self.quota * elapsed / 1000)
        self.last_ms = now_ms

    def measure(self, now_ms: float) -> float:
        self._refill(now_ms)
        assert self.tokens is not None
        return self.tokens

    def record(self, value: float, now_ms: float) -> None:
        self._refill(now_ms)
        assert self.tokens is not None
        self.tokens -= value

    def throttle_ms(self, now_ms: float) -> int:
        tokens = self.measure(now_ms)
        if tokens >= 0 or self.quota <= 0:
            return 0
        return round(-tokens / self.quota * 1000)
