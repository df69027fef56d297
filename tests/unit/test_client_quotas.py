"""quotas.client and quotas.controller_mutation: Kafka's figures, precedence and isolation."""

from __future__ import annotations

import pytest

from quotas.client import LONG_MAX, ClientQuotaManager
from quotas.controller_mutation import ControllerMutationQuotaManager


def test_anchor_through_the_manager() -> None:
    # ClientQuotaManagerTest.testQuotaViolation: quota 500 B/s, 400 B/s for 10 s, 2300 B at 10.5 s.
    q = ClientQuotaManager("produce", pace_burst_seconds=None)
    q.set_entity_quota("ANONYMOUS", 500)
    for second in range(10):
        assert q.record("ANONYMOUS", 400, second * 1000) == 0
    assert q.record("ANONYMOUS", 2300, 10_500) == 2100
    assert q.throttle_time_avg("ANONYMOUS", 10_500) == 2100
    # Nothing more while held: the next measurement is back under the quota.
    assert q.rate("ANONYMOUS", 10_500 + 2100) < q.rate("ANONYMOUS", 10_500)


def test_pacing_holds_for_the_larger_of_kafkas_throttle_and_the_buckets_debt() -> None:
    # The anchor again, paced: the 1 s bucket (500 B) is full at 10.5 s and 2300 B leave it
    # 1800 B in debt, 3.6 s at 500 B/s, longer than Kafka's 2.1 s.
    q = ClientQuotaManager("produce")
    q.set_entity_quota("ANONYMOUS", 500)
    for second in range(10):
        assert q.record("ANONYMOUS", 400, second * 1000) == 0
    assert q.record("ANONYMOUS", 2300, 10_500) == 3600
    # A fetch owes the bucket's debt before reading, and nothing once it is paid.
    f = ClientQuotaManager("fetch")
    f.set_entity_quota("c", 1000)
    f.record_only("c", 3000, 0)
    assert f.throttle_before("c", 0) == 2000
    assert f.throttle_before("c", 2000) == 0


def greedy_client(q: ClientQuotaManager, request: int, seconds: float) -> list[tuple[float, int]]:
    """A client offering far more than its quota: the next request as soon as a hold ends."""
    now, sent, out = 0.0, 0, []
    while now < seconds * 1000:
        hold = q.record("greedy", request, now)
        sent += request
        out.append((now, sent))
        now += max(hold, 5)  # a few ms per round trip
    return out


def worst_span(points: list[tuple[float, int]], quota: float, span_s: float, start_s: float) -> float:
    """The largest |rate / quota - 1| over every span_s-second span starting after start_s."""
    worst = 0.0
    for t0, b0 in points:
        if t0 < start_s * 1000:
            continue
        later = [(t, b) for t, b in points if t >= t0 + span_s * 1000]
        if not later:
            break
        t1, b1 = later[0]
        worst = max(worst, abs((b1 - b0) / ((t1 - t0) / 1000) / quota - 1))
    return worst


def test_pacing_keeps_a_greedy_client_within_5_percent_over_any_30_s() -> None:
    quota = 100_000
    paced = ClientQuotaManager("produce")
    paced.set_entity_quota("greedy", quota)
    assert worst_span(greedy_client(paced, 16_384, 120), quota, 30, 0) < 0.05
    # Kafka's throttle alone lets ten seconds of quota through at once, once every window.
    kafka = ClientQuotaManager("produce", pace_burst_seconds=None)
    kafka.set_entity_quota("greedy", quota)
    assert worst_span(greedy_client(kafka, 16_384, 120), quota, 30, 11) > 0.05


def test_pacing_follows_a_quota_change() -> None:
    q = ClientQuotaManager("produce")
    q.set_entity_quota("c", 1000)
    assert q.record("c", 1000, 0) == 0  # the whole 1 s bucket
    q.set_entity_quota("c", 10_000)
    # 0.5 s later the bucket holds the 500 B earned at the old rate; the other 4500 B are
    # paid back at the new 10,000 B/s.
    assert q.record("c", 5000, 500) == 450
    q.set_entity_quota("c", None)
    assert q.record("c", 10**9, 500) == 0  # unlimited: never paced


def test_precedence_own_entity_default_entity_static_override_static_default() -> None:
    q = ClientQuotaManager("produce", static_default=1000, static_overrides={"a": 4 << 20})
    assert q.quota("x") == 1000
    assert q.quota("a") == 4 << 20
    q.set_entity_quota("<default>", 2000)
    assert q.quota("x") == 2000 and q.quota("a") == 2000
    q.set_entity_quota("a", 3000)
    assert q.quota("a") == 3000 and q.quota("x") == 2000
    q.set_entity_quota("a", None)
    q.set_entity_quota("<default>", None)
    assert q.quota("a") == 4 << 20


def test_unlimited_clients_are_measured_not_throttled() -> None:
    q = ClientQuotaManager("fetch", static_default=LONG_MAX)
    assert q.quota("c") is None
    assert q.record("c", 10 << 30, 0) == 0
    assert q.rate("c", 0) > 0


def test_clients_without_an_id_share_one_entity_and_others_are_isolated() -> None:
    q = ClientQuotaManager("produce", static_default=100, pace_burst_seconds=None)
    # 2000 B over a padded 10 s window is 200 B/s, twice the quota: held 10 s.
    assert q.record("", 2000, 0) == 10_000
    assert q.record("", 0, 0) == 10_000  # the same client, still over
    assert q.record("other", 500, 0) == 0  # 50 B/s: its own sensor


def test_fetch_delay_is_owed_before_reading() -> None:
    q = ClientQuotaManager("fetch", pace_burst_seconds=None)
    q.set_entity_quota("<default>", 100)
    assert q.throttle_before("c", 0) == 0
    q.record_only("c", 2000, 0)  # 200 B/s over a padded 10 s window
    assert q.throttle_before("c", 0) == round((200 - 100) / 100 * 10_000)
    # Nothing more recorded: the window grows and the debt shrinks.
    assert q.throttle_before("c", 15_000) == 0


def test_idle_sensors_expire() -> None:
    q = ClientQuotaManager("produce")
    q.record("gone", 1, 0)
    q.record("here", 1, 3_700_000)
    assert q.all_tags() == [("", "here")]


T0 = 86_400_000.0  # a monotonic clock that started long ago
WINDOW_MS = 11 * 1000  # the default quota window: 11 samples of 1 s


def test_without_quotas_an_idle_client_ids_sensor_goes_after_the_quota_window() -> None:
    # No quota configured (Kafka then keeps no sensors at all): a one-off client id is measured
    # while active and dropped once idle for the whole window, when all it reports is 0.
    q = ClientQuotaManager("produce")
    q.record("one-off", 1000, T0)
    assert q.rate("one-off", T0) > 0
    q.record("busy", 10, T0 + WINDOW_MS - 1)
    assert set(q.all_tags()) == {("", "one-off"), ("", "busy")}
    assert q.rate("one-off", T0 + WINDOW_MS) == 0.0 and q.throttle_time_avg("one-off", T0 + WINDOW_MS) == 0.0
    q.record("busy", 10, T0 + WINDOW_MS + 1)
    assert q.all_tags() == [("", "busy")]
    # The fetch path (throttle_before, then record_only) sweeps too.
    f = ClientQuotaManager("fetch")
    f.throttle_before("one-off", T0)
    f.record_only("one-off", 100, T0)
    f.throttle_before("next", T0 + WINDOW_MS + 1)
    assert f.all_tags() == [("", "next")]


def test_a_client_id_back_after_its_sensor_went_is_measured_as_a_new_one() -> None:
    # The same rate as a sensor never dropped: its samples had all expired anyway.
    kept = ClientQuotaManager("produce", pace_burst_seconds=None)
    dropped = ClientQuotaManager("produce", pace_burst_seconds=None)
    for q in (kept, dropped):
        q.record("c", 5000, T0)
    kept.rate("c", T0 + WINDOW_MS + 2)  # read, never swept: its samples reset in place
    dropped.record("other", 1, T0 + WINDOW_MS + 1)
    assert ("", "c") in kept.all_tags() and ("", "c") not in dropped.all_tags()
    for q in (kept, dropped):
        q.record("c", 700, T0 + WINDOW_MS + 2)
    assert kept.rate("c", T0 + WINDOW_MS + 500) == dropped.rate("c", T0 + WINDOW_MS + 500)


def test_with_a_quota_configured_idle_sensors_stay_for_kafkas_hour() -> None:
    q = ClientQuotaManager("produce")
    q.set_entity_quota("someone-else", 1_000_000)  # any quota of the type: Kafka's quotasEnabled
    q.record("a", 1, T0)
    q.record("b", 1, T0 + WINDOW_MS + 1)
    q.record("b", 1, T0 + 60_001)
    assert set(q.all_tags()) == {("", "a"), ("", "b")}
    q.record("c", 1, T0 + 3_600_001)
    assert set(q.all_tags()) == {("", "b"), ("", "c")}
    # Removing the quota again does not shorten the hour (Kafka's quota types stay enabled).
    q.set_entity_quota("someone-else", None)
    q.record("c", 1, T0 + 3_600_001 + 60_000)  # a sweep: "b" idle just under the hour, still kept
    assert set(q.all_tags()) == {("", "b"), ("", "c")}


def test_an_unthrottled_sensor_reports_no_throttle_and_a_throttled_one_its_average() -> None:
    q = ClientQuotaManager("produce", pace_burst_seconds=None)
    q.set_entity_quota("slow", 100)
    assert q.record("fast", 10_000, T0) == 0
    assert q.throttle_time_avg("fast", T0) == 0.0
    assert q.record("slow", 2000, T0) == round((2000 / 10 - 100) / 100 * 10_000)
    assert q.throttle_time_avg("slow", T0) == 10_000


def test_mutation_sensors_of_unlimited_clients_go_after_the_quota_window() -> None:
    m = ControllerMutationQuotaManager(11, 1)
    m.permissive("one-off", 4, T0)
    m.permissive("next", 1, T0 + WINDOW_MS + 1)
    assert list(m.clients) == [("", "next")]
    assert m.rate("one-off", T0 + WINDOW_MS + 1) == 0.0


def test_mutation_sensors_stay_for_kafkas_hour_once_a_quota_is_configured() -> None:
    m = ControllerMutationQuotaManager(11, 1)
    m.set_entity_quota("admin", 5, T0)
    m.strict("one-off", 4, T0)
    m.strict("admin", 4, T0 + WINDOW_MS + 1)
    m.strict("next", 1, T0 + 60_001)
    assert set(m.clients) == {("", "one-off"), ("", "admin"), ("", "next")}
    m.strict("late", 1, T0 + 3_600_001)
    assert set(m.clients) == {("", "admin"), ("", "next"), ("", "late")}
    assert m.throttle_time_avg("one-off", T0 + 3_600_001) == 0.0


@pytest.mark.parametrize("t0", [0, 86_400_000])  # a clock that started long ago (monotonic ms)
def test_mutation_strict_burst_of_60_topics_of_4_partitions(t0: float) -> None:
    # Quota 5/s, 11 samples of 1 s: burst 55. A topic is admitted while tokens >= 0.
    m = ControllerMutationQuotaManager(11, 1)
    m.set_entity_quota("admin", 5, t0)
    outcome = [m.strict("admin", 4, t0) for _ in range(60)]
    admitted = [t for t in outcome if t == 0]
    assert len(admitted) == 14  # 55 - 14 * 4 = -1
    assert m.tokens("admin", t0) == -1
    assert set(outcome[14:]) == {200}  # -(-1) / 5 s
    # After the throttle the client's retry gets in.
    assert m.strict("admin", 4, t0 + 200) == 0


def test_mutation_permissive_admits_and_charges() -> None:
    m = ControllerMutationQuotaManager(11, 1)
    m.set_entity_quota("<default>", 5, 0)
    throttles = [m.permissive("old", 4, 0) for _ in range(60)]
    assert throttles[12] == 0 and throttles[13] == round(1 / 5 * 1000)
    assert throttles[-1] == round((240 - 55) / 5 * 1000)


def test_mutation_isolation_unlimited_and_live_change() -> None:
    m = ControllerMutationQuotaManager(11, 1)
    m.set_entity_quota("a", 1, 0)
    assert m.strict("a", 20, 0) == 0 and m.strict("a", 1, 0) > 0
    assert m.strict("b", 1000, 0) == 0  # no quota for b
    assert m.tokens("b", 0) is None
    m.set_entity_quota("a", 100, 0)  # tokens kept (-9), burst now 1100, refill 100/s
    assert m.tokens("a", 0) == -9
    assert m.strict("a", 1, 100) == 0


def test_validate_only_and_rates_show_in_metrics() -> None:
    m = ControllerMutationQuotaManager(11, 1)
    m.set_entity_quota("<default>", 5, 0)
    m.strict("c", 10, 0)
    assert m.rate("c", 0) == 1.0  # 10 over the padded 10 s window
