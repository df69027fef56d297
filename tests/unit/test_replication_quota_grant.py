"""The leader's minimum grant: a throttled partition waits for a useful amount, not crumbs."""

from __future__ import annotations

from quotas.replication import MIN_GRANT_BYTES, ReplicationQuotaManager


def test_min_grant_scales_with_the_quota_and_has_a_floor() -> None:
    q = ReplicationQuotaManager(11, 1, lambda: 0.0)
    assert q.min_grant() == 0.0  # no quota: nothing is throttled
    q.update_quota(1_000_000)
    assert q.min_grant() == MIN_GRANT_BYTES
    q.update_quota(100_000_000)
    assert q.min_grant() == 500_000  # 5 ms of the quota
