"""KIP-599's controller mutation quota: a token bucket per sensor, counted in partitions.

`controller_mutation_rate` comes from KIP-55's levels (`quotas.entities`: user+client-id,
user, client-id entities and their `<default>`s, no static quota); a request counts under
its sensor's `Tags` (user, client id) as Kafka's ControllerMutationQuotaManager, a
ClientQuotaManager, does. Without a matching entity a client is unlimited (nothing is
throttled, the rate is still measured). The bucket holds samples × window × rate tokens and
starts full.

Strict mode (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) checks before each
topic: tokens below zero reject it (THROTTLING_QUOTA_EXCEEDED) with throttle
-tokens / rate; otherwise the topic's whole partition count is taken, which may drive the
tokens negative (one large topic is admitted, then paid back). Permissive mode (older
versions, whose clients know no such error) takes every topic and returns the throttle for
the connection to be muted. ValidateOnly requests never reach here.

Idle sensors are dropped as the byte-rate quotas' are (`QuotaEntities.sensor_expiry_ms`:
Kafka's hour, or the quota window while no mutation quota was ever configured), looked for at
most once a minute.

Time is passed in, in milliseconds; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quotas.entities import DEFAULT, EXPIRY_SWEEP_MS, QuotaEntities, Tags, sensor_tags
from quotas.rate import Rate, WindowedSum
from quotas.token_bucket import TokenBucket

DEFAULT_ENTITY = DEFAULT
__all__ = ["DEFAULT_ENTITY", "ControllerMutationQuotaManager"]


@dataclass(slots=True)
class _ClientState:
    rate: Rate
    throttle: WindowedSum | None = None  # made at the first throttle
    bucket: TokenBucket | None = None
    last_ms: float = 0.0


@dataclass
class ControllerMutationQuotaManager:
    samples: int = 11
    window_seconds: float = 1
    entities: QuotaEntities = field(default_factory=QuotaEntities)
    clients: dict[Tags, _ClientState] = field(default_factory=dict)  # by sensor tags
    _last_expiry_ms: float = 0.0

    def set_entity_quota(self, entity: str, rate: float | None, now_ms: float) -> None:
        """A dynamic rate (partitions/s) for a client id or `<default>`; None removes it."""
        self.set_quota(None, entity, rate, now_ms)

    def set_quota(self, user: str | None, client_id: str | None, rate: float | None, now_ms: float) -> None:
        """A dynamic rate for any KIP-55 entity; None removes it.

        Buckets already in use keep their tokens and change only their rate and burst.
        """
        self.entities.set(user, client_id, rate)
        for tags, st in self.clients.items():
            self._rebucket(tags, st, now_ms)

    def quota(self, client_id: str, user: str = "") -> float | None:
        return self.entities.resolve(user, client_id)[1]

    def _rebucket(self, tags: Tags, st: _ClientState, now_ms: float) -> None:
        q = self.entities.limit(tags)
        if q is None:
            st.bucket = None
        elif st.bucket is None:
            st.bucket = TokenBucket(q, self.samples, self.window_seconds)
        elif st.bucket.quota != q:
            st.bucket.set_quota(q, now_ms)

    def _state(self, client_id: str, user: str, now_ms: float) -> _ClientState:
        tags = self.entities.tags(user, client_id)
        st = self.clients.get(tags)
        if st is None:
            self._expire(now_ms)
            st = self.clients[tags] = _ClientState(Rate(self.samples, self.window_seconds))
            self._rebucket(tags, st, now_ms)
        st.last_ms = now_ms
        return st

    def _record(self, st: _ClientState, partitions: int, now_ms: float) -> None:
        st.rate.record(partitions, now_ms)
        if st.bucket is not None:
            st.bucket.record(partitions, now_ms)

    def _throttle(self, st: _ClientState, now_ms: float) -> int:
        if st.bucket is None:
            return 0
        ms = st.bucket.throttle_ms(now_ms)
        if ms:
            if st.throttle is None:
                st.throttle = WindowedSum(self.samples, self.window_seconds * 1000)
            st.throttle.record(ms, now_ms)
        return ms

    def strict(self, client_id: str, partitions: int, now_ms: float, user: str = "") -> int:
        """Admit (record, return 0) unless the tokens are already below zero: then the throttle ms."""
        st = self._state(client_id, user, now_ms)
        if st.bucket is not None and st.bucket.measure(now_ms) < 0:
            return max(1, self._throttle(st, now_ms))
        self._record(st, partitions, now_ms)
        return 0

    def permissive(self, client_id: str, partitions: int, now_ms: float, user: str = "") -> int:
        """Always admit; the throttle (ms) the client owes afterwards."""
        st = self._state(client_id, user, now_ms)
        self._record(st, partitions, now_ms)
        return self._throttle(st, now_ms)

    def throttle_now(self, client_id: str, now_ms: float, user: str = "") -> int:
        """The throttle owed after the topics of one request (for its throttle_time_ms)."""
        st = self.clients.get(self.entities.tags(user, client_id))
        return 0 if st is None or st.bucket is None else st.bucket.throttle_ms(now_ms)

    # ---- what metrics show: per sensor, by its tags (a bare client id means ("", id)) -------

    def rate(self, sensor: Tags | str, now_ms: float) -> float:
        st = self.clients.get(sensor_tags(sensor))
        return 0.0 if st is None else st.rate.measure(now_ms)

    def tokens(self, sensor: Tags | str, now_ms: float) -> float | None:
        st = self.clients.get(sensor_tags(sensor))
        return None if st is None or st.bucket is None else st.bucket.measure(now_ms)

    def throttle_time_avg(self, sensor: Tags | str, now_ms: float) -> float:
        st = self.clients.get(sensor_tags(sensor))
        return 0.0 if st is None or st.throttle is None else st.throttle.mean(now_ms)

    def _expire(self, now_ms: float) -> None:
        expiry = self.entities.sensor_expiry_ms(self.samples * self.window_seconds * 1000)
        if now_ms - self._last_expiry_ms < min(EXPIRY_SWEEP_MS, expiry):
            return
        self._last_expiry_ms = now_ms
        for tags in [t for t, s in self.clients.items() if now_ms - s.last_ms > expiry]:
            del self.clients[tags]

