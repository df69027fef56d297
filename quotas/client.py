"""KIP-13 client byte-rate quotas: one manager per quota type (produce, fetch).

Each client id has a sensor: a `Rate` of bytes (young windows padded to samples - 1, so
Kafka's formula does not throttle a new client's first request; pacing, below, holds one
larger than a second of quota) and the average throttle time handed out. A client whose
measured rate is above its quota T is held for `round((O - T) / T * W)` ms, O the rate
and W the Rate's window at that moment — the time it takes for the window's average to
come back down to T if the client sends nothing.

Where the quota comes from and which sensor a request counts under is KIP-55's precedence
over user, user+client-id and client-id entities (`quotas.entities`): a sensor is keyed by
its `Tags` (user, client id), "" for a part the matched level leaves out. Below the user
levels: `/config/clients/<id>`, then `/config/clients/<default>`, then the static
`quota.<type>.override` list, then `quota.<type>.default`. Clients without a client id
share the "" entity. A quota at or above Long.MaxValue is unlimited, and unlimited clients
are still measured (their rate is a metric). Sensors idle for an hour are dropped (Kafka's
sensor expiry); while no quota of the type was ever configured (Kafka then keeps no sensors),
once idle for the quota window, when they read 0 anyway (`QuotaEntities.sensor_expiry_ms`), so a
stream of one-off client ids does not grow the broker. A sensor's throttle average is made at
its first throttle: most clients are never throttled.

Every method takes the request's client id and, as `user`, its principal's name in Kafka's
sanitized form ("" when there is no principal: then only client-id levels can match).

Departure from Kafka: pacing. Kafka's throttle lets a client through whenever the
window's average is under T, so a client offering more than its quota sends a window's
worth (~10 s of quota) in one burst each time the last burst leaves the window, then
waits ~10 s: measured here, 3.7x the quota in the burst second, 1.06-1.09 T over a 30 s
span. Each client therefore also has a token bucket of `pace_burst_seconds` of its quota
(1 s; the bucket starts full), and the hold is the larger of Kafka's throttle and the
bucket's debt (-tokens / T). The client moves at T within a second's burst on any span;
the Rate, its metric and Kafka's formula are unchanged (`pace_burst_seconds=None` gives
Kafka's exact holds, which the unit tests check against Kafka's figures).

Time is passed in, in milliseconds; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quotas.entities import DEFAULT, EXPIRY_SWEEP_MS, LONG_MAX, QuotaEntities, Tags, sensor_tags
from quotas.rate import Rate, WindowedSum, exceeds
from quotas.token_bucket import TokenBucket

__all__ = ["LONG_MAX", "ClientQuotaManager", "Tags"]


@dataclass(slots=True)
class _Sensor:
    rate: Rate
    throttle: WindowedSum | None = None  # made at the first throttle
    last_ms: float = 0.0
    pace: TokenBucket | None = None


@dataclass
class ClientQuotaManager:
    """Per-client-id byte-rate quota of one type ("produce" or "fetch")."""

    kind: str
    samples: int = 11
    window_seconds: float = 1
    static_default: float = LONG_MAX
    static_overrides: dict[str, float] = field(default_factory=dict)
    sensors: dict[Tags, _Sensor] = field(default_factory=dict)
    pace_burst_seconds: float | None = 1.0
    entities: QuotaEntities = field(init=False)
    _last_expiry_ms: float = 0.0

    DEFAULT_ENTITY = DEFAULT

    def __post_init__(self) -> None:
        self.entities = QuotaEntities(self.static_default, self.static_overrides)

    # ---- quotas ------------------------------------------------------------------------

    def set_entity_quota(self, entity: str, bytes_per_second: float | None) -> None:
        """A dynamic quota for a client id or for `<default>` (`/config/clients/...`); None removes it."""
        self.entities.set(None, entity, bytes_per_second)

    def set_quota(self, user: str | None, client_id: str | None, bytes_per_second: float | None) -> None:
        """A dynamic quota for any KIP-55 entity (user sanitized or `<default>`; None: not part of it)."""
        self.entities.set(user, client_id, bytes_per_second)

    def quota(self, client_id: str, user: str = "") -> float | None:
        """The bound in force for a request of this client and user, None when unlimited."""
        return self.entities.resolve(user, client_id)[1]

    # ---- measuring and throttling --------------------------------------------------------

    def _sensor(self, tags: Tags, now_ms: float) -> _Sensor:
        s = self.sensors.get(tags)
        if s is None:
            s = self.sensors[tags] = _Sensor(Rate(self.samples, self.window_seconds))
        s.last_ms = now_ms
        return s

    def _record_throttle(self, s: _Sensor, throttle: int, now_ms: float) -> None:
        if s.throttle is None:
            s.throttle = WindowedSum(self.samples, self.window_seconds * 1000)
        s.throttle.record(throttle, now_ms)

    def _throttle_ms(self, s: _Sensor, quota: float | None, now_ms: float) -> int:
        if quota is None:
            return 0
        observed = s.rate.measure(now_ms)
        if not exceeds(observed, quota):
            return 0
        if quota <= 0:
            return int(self.samples * self.window_seconds * 1000)
        return round((observed - quota) / quota * s.rate.window_ms(now_ms))

    def _bucket(self, s: _Sensor, quota: float | None, now_ms: float) -> TokenBucket | None:
        if quota is None or quota <= 0 or self.pace_burst_seconds is None:
            return None
        if s.pace is None:
            s.pace = TokenBucket(quota, 1, self.pace_burst_seconds)
        elif s.pace.quota != quota:
            s.pace.set_quota(quota, now_ms)
        return s.pace

    def record(self, client_id: str, nbytes: int, now_ms: float, user: str = "") -> int:
        """Count bytes sent or received for this client; the throttle (ms) they earn."""
        tags, quota = self.entities.resolve(user, client_id)
        s = self._sensor(tags, now_ms)
        s.rate.record(nbytes, now_ms)
        throttle = self._throttle_ms(s, quota, now_ms)
        bucket = self._bucket(s, quota, now_ms)
        if bucket is not None:
            bucket.record(nbytes, now_ms)
            throttle = max(throttle, bucket.throttle_ms(now_ms))
        if throttle:
            self._record_throttle(s, throttle, now_ms)
        self._maybe_expire(now_ms)
        return throttle

    def throttle_before(self, client_id: str, now_ms: float, user: str = "") -> int:
        """KIP-13's fetch path: the delay owed now, before reading (nothing recorded)."""
        tags, quota = self.entities.resolve(user, client_id)
        s = self._sensor(tags, now_ms)
        throttle = self._throttle_ms(s, quota, now_ms)
        bucket = self._bucket(s, quota, now_ms)
        if bucket is not None:
            throttle = max(throttle, bucket.throttle_ms(now_ms))
        if throttle:
            self._record_throttle(s, throttle, now_ms)
        self._maybe_expire(now_ms)
        return throttle

    def record_only(self, client_id: str, nbytes: int, now_ms: float, user: str = "") -> None:
        tags, quota = self.entities.resolve(user, client_id)
        s = self._sensor(tags, now_ms)
        s.rate.record(nbytes, now_ms)
        bucket = self._bucket(s, quota, now_ms)
        if bucket is not None:
            bucket.record(nbytes, now_ms)
        self._maybe_expire(now_ms)

    # ---- what metrics show: per sensor, by its tags (a bare client id means ("", id)) -------

    def rate(self, sensor: Tags | str, now_ms: float) -> float:
        s = self.sensors.get(sensor_tags(sensor))
        return 0.0 if s is None else s.rate.measure(now_ms)

    def throttle_time_avg(self, sensor: Tags | str, now_ms: float) -> float:
        """Kafka's throttle-time sensor: the average throttle over the window (0 when none)."""
        s = self.sensors.get(sensor_tags(sensor))
        return 0.0 if s is None or s.throttle is None else s.throttle.mean(now_ms)

    def sensor_quota(self, sensor: Tags) -> float | None:
        """The bound in force for a sensor's tags (Kafka's quotaLimit), None when unlimited."""
        return self.entities.limit(sensor)

    def all_tags(self) -> list[Tags]:
        return list(self.sensors)

    def _maybe_expire(self, now_ms: float) -> None:
        expiry = self.entities.sensor_expiry_ms(self.samples * self.window_seconds * 1000)
        if now_ms - self._last_expiry_ms < min(EXPIRY_SWEEP_MS, expiry):
            return
        self._last_expiry_ms = now_ms
        for tags in [t for t, s in self.sensors.items() if now_ms - s.last_ms > expiry]:
            del self.sensors[tags]

