"""ISR by lag time on simulated time: KAFKA-1546's scenarios."""

from __future__ import annotations

from broker.replication.isr import IsrTracker

LAG = 10_000


def test_stuck_follower_leaves_after_lag_time() -> None:
    isr = [1, 2, 3]
    t = IsrTracker(1, [1, 2, 3], now_ms=0, lag_time_max_ms=LAG)
    t.on_fetch(2, 100, 100, 1000)
    t.on_fetch(3, 100, 100, 1000)
    # Follower 3 stops fetching; 2 keeps up while the leader grows.
    for now in range(2000, 12_000, 500):
        t.on_fetch(2, 100 + now, 100 + now, now)
    assert t.shrink(isr, leader_leo=11_600, now_ms=11_000) == []  # 3 last caught up at 1000: 10 s exactly
    assert t.shrink(isr, leader_leo=11_600, now_ms=11_001) == [3]
    assert t.shrink([1, 2], leader_leo=11_600, now_ms=11_001) == []  # judged on the ISR it is given


def test_lagging_follower_that_keeps_reaching_previous_end_stays() -> None:
    # A large batch lands between fetches: the follower never equals the current log end,
    # but always reaches the end the leader had at its previous fetch (KAFKA-4485).
    t = IsrTracker(1, [1, 2], now_ms=0, lag_time_max_ms=LAG)
    leo = 0
    for i in range(100):
        now = i * 500
        t.on_fetch(2, leo, leo + 50_000, now)  # asks for the old end; the leader has moved on
        leo += 50_000
        assert t.shrink([1, 2], leader_leo=leo, now_ms=now) == []


def test_follower_falling_behind_leaves() -> None:
    t = IsrTracker(1, [1, 2], now_ms=0, lag_time_max_ms=LAG)
    t.on_fetch(2, 0, 0, 0)
    leo = 0
    for i in range(1, 30):
        now = i * 500
        leo += 1000
        t.on_fetch(2, leo // 2, leo, now)  # never reaches even the previous end
    assert t.shrink([1, 2], leader_leo=leo, now_ms=10_001 + 500) == [2]


def test_high_watermark_and_expand() -> None:
    isr = [1, 2]
    t = IsrTracker(1, [1, 2, 3], now_ms=0, lag_time_max_ms=LAG)
    t.on_fetch(2, 40, 50, 100)
    t.on_fetch(3, 10, 50, 100)
    assert t.high_watermark(isr, 50) == 40  # 3 is outside the ISR and does not hold it back
    assert not t.expand(isr, 3, 40)
    t.on_fetch(3, 45, 50, 200)
    assert t.expand(isr, 3, 40)
    isr.append(3)
    assert t.high_watermark(isr, 50) == 40
    assert not t.expand(isr, 3, 40)  # already in
    t.on_fetch(3, 30, 50, 300)
    assert t.high_watermark(isr, 50) == 30  # now in: it holds the high watermark back


def test_new_follower_gets_one_lag_time() -> None:
    t = IsrTracker(1, [1, 2], now_ms=5000, lag_time_max_ms=LAG)
    assert t.shrink([1, 2], leader_leo=10, now_ms=15_000) == []
    assert t.shrink([1, 2], leader_leo=10, now_ms=15_001) == [2]


def test_a_fetch_offset_beyond_the_leaders_log_end_is_not_progress() -> None:
    t = IsrTracker(1, [1, 2], now_ms=0, lag_time_max_ms=LAG)
    assert t.on_fetch(2, 40, 50, 100) is True
    assert t.on_fetch(2, 10**12, 50, 200) is False
    assert t.on_fetch(2, -1, 50, 200) is False
    assert t.on_fetch(7, 50, 50, 200) is False  # not a follower
    assert t.followers[2].log_end_offset == 40 and t.followers[2].last_fetch_ms == 100
    assert t.high_watermark([1, 2], 50) == 40
