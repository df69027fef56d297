"""The broker's callback gauges over replication, KIP-73 throttles and client quotas.

Each gauge reads its owner's state when scraped; nothing here keeps state of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.metrics import Registry
from broker.replication.replica_manager import ReplicaManager
from broker.replication.throttles import ReplicationThrottles
from quotas.client import ClientQuotaManager
from quotas.controller_mutation import ControllerMutationQuotaManager
from quotas.entities import Tags

Samples = list[tuple[dict[str, str], float]]


def register_replication_gauges(m: Registry, replicas: ReplicaManager, throttles: ReplicationThrottles) -> None:
    m.gauge("sum_replica_lag", "Messages the followers of led partitions are behind",
            lambda: [({}, replicas.sum_replica_lag())])
    m.gauge("leader_replication_throttled_rate", "Throttled replication bytes/s sent as leader (KIP-73)",
            lambda: [({}, throttles.leader.measured_rate())])
    m.gauge("follower_replication_throttled_rate", "Throttled replication bytes/s fetched as follower (KIP-73)",
            lambda: [({}, throttles.follower.measured_rate())])
    m.gauge("leader_replication_throttle_bytes_per_second", "Leader throttle in force (absent: unlimited)",
            lambda: [] if throttles.leader.quota is None else [({}, throttles.leader.quota)])
    m.gauge("follower_replication_throttle_bytes_per_second", "Follower throttle in force (absent: unlimited)",
            lambda: [] if throttles.follower.quota is None else [({}, throttles.follower.quota)])


def register_quota_gauges(m: Registry, produce: ClientQuotaManager, fetch: ClientQuotaManager,
                          mutation: ControllerMutationQuotaManager, now_ms: Callable[[], float]) -> None:
    """One series per quota sensor, labelled with its tags as Kafka's (KIP-55): `user` is the
    sanitized user or "" and `client_id` the client id or "", whichever the matched quota level
    names. With client-id quotas only, `user` is "" (Prometheus' "no label"), so the series are
    those of before user quotas."""
    byte_quotas = (produce, fetch)

    def labels(tags: Tags, **more: str) -> dict[str, str]:
        return {"user": tags.user, "client_id": tags.client_id, **more}

    def client_rates() -> Samples:
        now = now_ms()
        return [(labels(t, type=q.kind), q.rate(t, now)) for q in byte_quotas for t in q.all_tags()]

    def client_throttles() -> Samples:
        now = now_ms()
        return [(labels(t, type=q.kind), q.throttle_time_avg(t, now))
                for q in byte_quotas for t in q.all_tags()]

    def client_quotas() -> Samples:
        out = []
        for q in byte_quotas:
            for t in q.all_tags():
                bound = q.sensor_quota(t)
                if bound is not None:
                    out.append((labels(t, type=q.kind), bound))
        return out

    def mutation_metric(fn: Callable[[Tags, float], float | None]) -> Callable[[], Samples]:
        def samples() -> Samples:
            now = now_ms()
            out = []
            for t in list(mutation.clients):
                v = fn(t, now)
                if v is not None:
                    out.append((labels(t), v))
            return out
        return samples

    m.gauge("client_byte_rate", "Bytes/s per client id and quota type (KIP-13)", client_rates)
    m.gauge("client_throttle_time_ms", "Average throttle per client id and quota type over the quota window",
            client_throttles)
    m.gauge("client_quota_bytes_per_second", "Client byte-rate quota in force (absent: unlimited)", client_quotas)
    m.gauge("controller_mutation_rate", "Partition mutations/s per client id (KIP-599)",
            mutation_metric(mutation.rate))
    m.gauge("controller_mutation_tokens", "Token bucket credit per client id (absent: unlimited)",
            mutation_metric(mutation.tokens))
    m.gauge("controller_mutation_throttle_time_ms", "Average mutation throttle per client id",
            mutation_metric(mutation.throttle_time_avg))
