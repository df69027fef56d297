"""KIP-599's controller mutation quota: a token bucket per client id, counted in partitions.

`controller_mutation_rate` comes from `/config/clients/<id>`, else `/config/clients/<default>`;
without either a client is unlimited (nothing is throttled, the rate is still measured). The
bucket holds samples × window × rate tokens and starts full.

Strict mode (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) checks before each
topic: tokens below zero reject it (THROTTLING_QUOTA_EXCEEDED) with throttle
-tokens / rate; otherwise the topic's whole partition count is taken, which may drive the
tokens negative (one large topic is admitted, then paid back). Permissive mode (older
versions, whose clients know no such error) takes every topic and returns the throttle for
the connection to be muted. ValidateOnly requests never reach here.

Time is passed in, in milliseconds; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quotas.rate import Rate, WindowedSum
from quotas.token_bucket import TokenBucket

DEFAULT_ENTITY = "<default>"
SENSOR_EXPIRY_MS = 3600 * 1000


@dataclass
class _ClientState:
    rate: Rate
    throttle: WindowedSum
    bucket: TokenBucket | None = None
    last_ms: float = 0.0


@dataclass
class ControllerMutationQuotaManager:
    samples: int = 11
    window_seconds: float = 1
    entity_quotas: dict[str, float] = field(default_factory=dict)
    clients: dict[str, _ClientState] = field(default_factory=dict)

    def set_entity_quota(self, entity: str, rate: float | None, now_ms: float) -> None:
        """A dynamic rate (partitions/s) for a client id or `<default>`; None removes it.

        Buckets already in use keep their tokens and change only their rate and burst.
        """
        if rate is None:
            self.entity_quotas.pop(entity, None)
        else:
            self.entity_quotas[entity] = rate
        for cid, st in self.clients.items():
            self._rebucket(cid, st, now_ms)

    def quota(self, client_id: str) -> float | None:
        q = self.entity_quotas.get(client_id)
        return self.entity_quotas.get(DEFAULT_ENTITY) if q is None else q

    def _rebucket(self, client_id: str, st: _ClientState, now_ms: float) -> None:
        q = self.quota(client_id)
        if q is None:
            st.bucket = None
        elif st.bucket is None:
            st.bucket = TokenBucket(q, self.samples, self.window_seconds)
        elif st.bucket.quota != q:
            st.bucket.set_quota(q, now_ms)

    def _state(self, client_id: str, now_ms: float) -> _ClientState:
        st = self.clients.get(client_id)
        if st is None:
            self._expire(now_ms)
            st = self.clients[client_id] = _ClientState(Rate(self.samples, self.window_seconds),
                                                        WindowedSum(self.samples, self.window_seconds * 1000))
            self._rebucket(client_id, st, now_ms)
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
            st.throttle.record(ms, now_ms)
        return ms

    def strict(self, client_id: str, partitions: int, now_ms: float) -> int:
        """Admit (record, return 0) unless the tokens are already below zero: then the throttle ms."""
        st = self._state(client_id, now_ms)
        if st.bucket is not None and st.bucket.measure(now_ms) < 0:
            return max(1, self._throttle(st, now_ms))
        self._record(st, partitions, now_ms)
        return 0

    def permissive(self, client_id: str, partitions: int, now_ms: float) -> int:
        """Always admit; the throttle (ms) the client owes afterwards."""
        st = self._state(client_id, now_ms)
        self._record(st, partitions, now_ms)
        return self._throttle(st, now_ms)

    def throttle_now(self, client_id: str, now_ms: float) -> int:
        """The throttle owed after the topics of one request (for its throttle_time_ms)."""
        st = self.clients.get(client_id)
        return 0 if st is None or st.bucket is None else st.bucket.throttle_ms(now_ms)

    # ---- what metrics show -------------------------------------------------------------

    def rate(self, client_id: str, now_ms: float) -> float:
        st = self.clients.get(client_id)
        return 0.0 if st is None else st.rate.measure(now_ms)

    def tokens(self, client_id: str, now_ms: float) -> float | None:
        st = self.clients.get(client_id)
        return None if st is None or st.bucket is None else st.bucket.measure(now_ms)

    def throttle_time_avg(self, client_id: str, now_ms: float) -> float:
        st = self.clients.get(client_id)
        return 0.0 if st is None else st.throttle.mean(now_ms)

    def _expire(self, now_ms: float) -> None:
        for cid in [c for c, s in self.clients.items() if now_ms - s.last_ms > SENSOR_EXPIRY_MS]:
            del self.clients[cid]
