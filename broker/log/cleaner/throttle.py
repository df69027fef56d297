"""log.cleaner.io.max.bytes.per.second: the cleaner's I/O bound, on KIP-73's rate mechanics.

Kafka's cleaner has its own Throttler; here the bound reuses quotas.replication's
ReplicationQuotaManager (SimpleRate over `samples` windows plus its short token bucket), as the
issue asks, so cleaner I/O is measured and held exactly like throttled replication. Every byte
read or written is recorded after the I/O; the task then waits while the quota's allowance is
used up. Reads are cut to a quarter second of the quota, so one step cannot overshoot by much.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from quotas.replication import ReplicationQuotaManager

# Kafka's default, Double.MaxValue, means unthrottled; so does anything of that order.
UNLIMITED = 1e300
MAX_CHUNK = 64 * 1024
MIN_CHUNK = 4 * 1024
CHUNK_SECONDS = 0.25


class CleanerThrottle:
    def __init__(self, bytes_per_second: float, clock_ms: Callable[[], float], samples: int = 11,
                 window_seconds: float = 1.0) -> None:
        self.quota = ReplicationQuotaManager(samples, window_seconds, clock_ms)
        self.set_rate(bytes_per_second)

    def set_rate(self, bytes_per_second: float) -> None:
        self.configured = bytes_per_second
        self.quota.update_quota(None if bytes_per_second >= UNLIMITED else float(bytes_per_second))

    @property
    def rate(self) -> float | None:
        return self.quota.quota

    def chunk(self) -> int:
        q = self.quota.quota
        if q is None:
            return MAX_CHUNK
        return int(max(MIN_CHUNK, min(MAX_CHUNK, q * CHUNK_SECONDS)))

    def measured(self) -> float:
        return self.quota.rate.measure(self.quota.clock())

    async def take(self, nbytes: int) -> None:
        """Record `nbytes` of cleaner I/O, then wait until the quota has room again."""
        if nbytes > 0:
            self.quota.record(nbytes)
        q = self.quota.quota
        if q is None:
            await asyncio.sleep(0)  # a step boundary: let appends and fetches run
            return
        while self.quota.allowance() <= 0:
            await asyncio.sleep(max(0.005, min(0.25, self.chunk() / q / 4)))
        await asyncio.sleep(0)
