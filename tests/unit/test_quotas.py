"""Kafka's own figures for its rates and token bucket, on simulated time."""

from __future__ import annotations

import pytest

from quotas.rate import Rate, SimpleRate, exceeds
from quotas.token_bucket import TokenBucket


def test_replication_quota_manager_table() -> None:
    # ReplicationQuotaManagerTest: 10 samples of 1 s, quota 100 B/s.
    rate = SimpleRate(10, 1)
    now = 0.0
    assert not exceeds(rate.measure(now), 100)  # the first measurement opens the first sample
    now = 1500.0
    rate.record(1, now)
    assert not exceeds(rate.measure(now), 100)
    rate.record(149, now)
    assert rate.measure(now) == pytest.approx(100)
    assert not exceeds(rate.measure(now), 100)
    rate.record(1, now)
    assert rate.measure(now) == pytest.approx(151 / 1.5)
    assert exceeds(rate.measure(now), 100)
    now = 2000.0
    assert rate.measure(now) == pytest.approx(75.5, abs=0.1)
    assert not exceeds(rate.measure(now), 100)


def test_simple_rate_decays_and_forgets() -> None:
    rate = SimpleRate(11, 1)
    for t in range(0, 5000, 100):
        rate.record(1000, t)
    assert rate.measure(5000) == pytest.approx(50_000 / 5.0)
    # Nothing recorded: the window keeps growing, the rate falls, and after
    # samples * window every sample is obsolete.
    assert rate.measure(10_000) < rate.measure(6000)
    assert rate.measure(30_000) == 0


def test_client_quota_anchor() -> None:
    # ClientQuotaManagerTest: quota 500 B/s, 400 B/s for 10 s, then 2300 bytes at 10.5 s.
    rate = Rate(11, 1)
    for second in range(10):
        rate.record(400, second * 1000)
    now = 10_500
    rate.record(2300, now)
    observed = rate.measure(now)
    assert observed == pytest.approx(600)
    throttle = round((observed - 500) / 500 * rate.window_ms(now))
    assert throttle == 2100


def test_rate_pads_young_windows() -> None:
    rate = Rate(11, 1)
    rate.record(5000, 0)
    # One sample, 0 ms old: padded to 10 whole windows, not a 5000 B/s spike.
    assert rate.window_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(500)


def test_token_bucket_sequence() -> None:
    # TokenBucketTest: quota 5/s, 2 s windows, 10 samples -> burst 100.
    bucket = TokenBucket(5, 10, 2)
    assert bucket.measure(0) == 100
    bucket.record(60, 0)
    assert bucket.measure(0) == 40
    bucket.record(5, 2000)
    assert bucket.measure(2000) == 45
    bucket.record(60, 4000)
    assert bucket.measure(4000) == -5
    assert bucket.throttle_ms(4000) == 1000
    assert bucket.measure(5000) == 0
    assert bucket.throttle_ms(5000) == 0


def test_token_bucket_never_exceeds_burst() -> None:
    bucket = TokenBucket(5, 11, 1)
    bucket.record(10, 0)
    assert bucket.measure(1_000_000) == bucket.burst == 55


def test_replication_quota_manager_lists_and_rate() -> None:
    from quotas.replication import ALL_PARTITIONS, ReplicationQuotaManager

    now = [0.0]
    q = ReplicationQuotaManager(10, 1, lambda: now[0])
    assert not q.is_quota_exceeded()  # no quota: never throttled
    q.mark_throttled("t", frozenset({0, 2}))
    q.mark_throttled("all", ALL_PARTITIONS)
    assert q.is_throttled("t", 0) and not q.is_throttled("t", 1) and q.is_throttled("all", 99)
    q.mark_throttled("t", None)
    assert not q.is_throttled("t", 0)
    q.update_quota(100)
    now[0] = 1500
    q.record(151)
    assert q.is_quota_exceeded()
    q.update_quota(200)  # samples kept, only the bound moves
    assert not q.is_quota_exceeded()


def test_replication_allowance_is_what_fits_under_the_bound() -> None:
    from quotas.replication import ReplicationQuotaManager

    now = [0.0]
    q = ReplicationQuotaManager(11, 1, lambda: now[0])
    assert q.allowance() == float("inf")  # no quota
    q.update_quota(1000)
    assert q.allowance() == 500  # at most half a second of the quota per fetch
    q.record(600)
    assert q.allowance() == 400  # a young history counts as one window
    q.reserve(300)  # asked for, not yet received: other fetchers must not spend it
    assert q.allowance() == 100
    q.release(300)
    now[0] = 3000  # three seconds of history: 3000 bytes fit in all, 600 spent
    assert q.allowance() == 500
    # A raise does not release the window's whole headroom (29,400 B) at once: the short
    # bound's bucket holds the 1000 B earned at the old rate and refills at the new one.
    q.update_quota(10_000)
    assert q.allowance() == 1000
    q.update_quota(1000)
    q.record(2400)
    assert q.allowance() == 0 and not q.is_quota_exceeded()
    q.record(1)
    assert q.allowance() == 0 and q.is_quota_exceeded()
    q.release(10**6)  # never below zero
    assert q.reserved == 0


def test_raising_the_quota_does_not_release_the_window_at_once() -> None:
    from quotas.replication import ReplicationQuotaManager

    now = [0.0]
    q = ReplicationQuotaManager(11, 1, lambda: now[0])
    q.update_quota(1000)
    for _ in range(10):  # ten seconds at exactly the quota
        q.record(1000)
        now[0] += 1000
    q.update_quota(3000)
    # The whole window would allow 3000 * 10 - 10000 = 20000 bytes at once; the short bound
    # allows what its bucket holds (one second of the old quota) and then the new rate.
    moved = 0.0
    for _ in range(50):
        a = q.allowance()
        if a <= 0:
            break
        q.record(a)
        moved += a
    assert moved == 1000
    now[0] += 500
    assert q.allowance() == 1500  # half a second at 3000 B/s
    q.record(1500)
    # From then on the rate is the new quota, second by second, though the window still
    # holds headroom from the old one (a bound over the last three samples let 2.3x through
    # in one second, then 0.3x, as each burst aged out).
    per_second = []
    for _ in range(10):
        moved = 0.0
        for _ in range(10):
            now[0] += 100
            a = q.allowance()
            q.record(a)
            moved += a
        per_second.append(moved)
    # (The tenth second meets Kafka's whole-window bound as the old samples age out.)
    assert all(2900 <= m <= 3100 for m in per_second[:9]) and per_second[9] <= 3100, str(per_second)
