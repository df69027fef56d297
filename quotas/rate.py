"""Kafka's windowed rate: SampledStat with Rate (client quotas) and SimpleRate (replication).

Semantics follow Kafka's `SampledStat`, `Rate` and `SimpleRate` exactly, because the
throttle times and test figures operators know come from them:
- a ring of at most `samples` samples, each {start, value, count}; recording moves to the
  next slot when the current one is `window_ms` old (starts are not aligned to a grid);
- before a measurement, samples older than `samples * window_ms` are reset (so the rate
  decays while nothing is recorded, and a throttle releases by itself);
- Rate pads a young history up to `samples - 1` whole windows (a new client is not
  throttled by its first burst); SimpleRate only floors the window at one `window_ms`.
Time is passed in (milliseconds); nothing here reads a clock. Every class has `__slots__`:
the client quotas keep two of these per client id (about 1.2 KiB each with instance dicts,
about half that without).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: float
    value: float = 0.0
    count: int = 0

    def reset(self, now_ms: float) -> None:
        self.start_ms = now_ms
        self.value = 0.0
        self.count = 0


class WindowedSum:
    """SampledStat over a sum: the recorded total of the live samples."""

    __slots__ = ("max_samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int, window_ms: float) -> None:
        if samples < 2:
            raise ValueError("a windowed rate needs at least 2 samples")
        if window_ms <= 0:
            raise ValueError("window must be positive")
        self.max_samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def _current_sample(self, now_ms: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: float) -> _Sample:
        self._current = (self._current + 1) % self.max_samples
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
        else:
            sample = self._samples[self._current]
            sample.reset(now_ms)
        return sample

    def record(self, value: float, now_ms: float) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.count += 1

    def purge(self, now_ms: float) -> None:
        expire = self.max_samples * self.window_ms
        for s in self._samples:
            if now_ms - s.start_ms >= expire:
                s.reset(now_ms)

    def oldest_start(self, now_ms: float) -> float:
        self._current_sample(now_ms)
        return min(s.start_ms for s in self._samples)

    def total(self, now_ms: float) -> float:
        self.purge(now_ms)
        return sum(s.value for s in self._samples)

    def count(self, now_ms: float) -> int:
        """How many values the live samples hold (for an average)."""
        self.purge(now_ms)
        return sum(s.count for s in self._samples)

    def mean(self, now_ms: float) -> float:
        """The average recorded value over the live samples (Kafka's Avg); 0 when there is none."""
        n = self.count(now_ms)
        return self.total(now_ms) / n if n else 0.0


class SimpleRate:
    """Replication quotas' rate (KIP-73): window = max(now - oldest start, one window)."""

    __slots__ = ("stat",)

    def __init__(self, samples: int, window_seconds: float) -> None:
        self.stat = WindowedSum(samples, window_seconds * 1000)

    def record(self, value: float, now_ms: float) -> None:
        self.stat.record(value, now_ms)

    def window_ms(self, now_ms: float) -> float:
        self.stat.purge(now_ms)
        return max(now_ms - self.stat.oldest_start(now_ms), self.stat.window_ms)

    def measure(self, now_ms: float) -> float:
        """Bytes per second."""
        total = self.stat.total(now_ms)
        return total / (self.window_ms(now_ms) / 1000)


class Rate(SimpleRate):
    """Client quotas' rate (KIP-13): a young history is padded to samples - 1 windows."""

    __slots__ = ()

    def window_ms(self, now_ms: float) -> float:
        self.stat.purge(now_ms)
        elapsed = now_ms - self.stat.oldest_start(now_ms)
        full = int(elapsed // self.stat.window_ms)
        need = self.stat.max_samples - 1
        if full < need:
            elapsed += (need - full) * self.stat.window_ms
        return elapsed


def exceeds(measured: float, bound: float) -> bool:
    """Kafka's Quota.acceptable for an upper bound, inverted: strictly above the bound."""
    return measured > bound
