"""quotas.entities: KIP-55's eight levels, Kafka 2.8's sensor tags, and the managers over them."""

from __future__ import annotations

import pytest

from quotas.client import LONG_MAX, ClientQuotaManager
from quotas.controller_mutation import ControllerMutationQuotaManager
from quotas.entities import DEFAULT, QuotaEntities, Tags

D = DEFAULT

# Every level, each with its own bound so the winner is visible: (entity, bound, tags for alice/app).
LEVELS = [
    (("alice", "app"), 1.0, Tags("alice", "app")),  # 1 /config/users/alice/clients/app
    (("alice", D), 2.0, Tags("alice", "app")),      # 2 /config/users/alice/clients/<default>
    (("alice", None), 3.0, Tags("alice", "")),      # 3 /config/users/alice
    ((D, "app"), 4.0, Tags("alice", "app")),        # 4 /config/users/<default>/clients/app
    ((D, D), 5.0, Tags("alice", "app")),            # 5 /config/users/<default>/clients/<default>
    ((D, None), 6.0, Tags("alice", "")),            # 6 /config/users/<default>
    ((None, "app"), 7.0, Tags("", "app")),          # 7 /config/clients/app
    ((None, D), 8.0, Tags("", "app")),              # 8 /config/clients/<default>
]


def all_levels(static_default: float = LONG_MAX) -> QuotaEntities:
    e = QuotaEntities(static_default)
    for (user, client), bound, _ in LEVELS:
        e.set(user, client, bound)
    return e


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_each_level_wins_over_every_level_below_it(level: int) -> None:
    e = all_levels(static_default=9.0)
    for (user, client), _, _ in LEVELS[:level]:
        e.set(user, client, None)  # the levels above are gone: this one is the highest left
    _, bound, tags = LEVELS[level]
    assert e.resolve("alice", "app") == (tags, bound)


def test_fall_through_ends_at_the_static_override_then_the_static_default() -> None:
    e = QuotaEntities(9.0, {"app": 10.0})
    e.set("bob", None, 1.0)  # another user's quota: a user kind is configured, alice matches nothing
    assert e.resolve("alice", "app") == (Tags("", "app"), 10.0)
    assert e.resolve("alice", "other") == (Tags("", "other"), 9.0)
    assert QuotaEntities().resolve("alice", "app") == (Tags("", "app"), None)  # unlimited


def test_users_sharing_the_default_user_quota_each_get_their_own_sensor() -> None:
    e = QuotaEntities()
    e.set(D, None, 100.0)
    assert e.resolve("alice", "a") == (Tags("alice", ""), 100.0)
    assert e.resolve("bob", "a") == (Tags("bob", ""), 100.0)
    # ... and one user's client ids share that user's sensor.
    assert e.tags("alice", "b") == e.tags("alice", "a")
    # A default <user, client> quota: one sensor per user and client id.
    e.set(D, D, 50.0)
    assert e.resolve("alice", "a") == (Tags("alice", "a"), 50.0)
    assert e.tags("alice", "b") == Tags("alice", "b")


def test_only_one_kind_configured_fixes_the_tags_as_kafka_does() -> None:
    # User quotas only: every request counts under (user, ""), bounded or not.
    e = QuotaEntities()
    e.set("bob", None, 10.0)
    assert e.resolve("alice", "app") == (Tags("alice", ""), None)
    assert e.resolve("bob", "app") == (Tags("bob", ""), 10.0)
    # <user, client> quotas only: (user, client).
    e = QuotaEntities()
    e.set("bob", "x", 10.0)
    assert e.resolve("alice", "app") == (Tags("alice", "app"), None)
    assert e.resolve("bob", "x") == (Tags("bob", "x"), 10.0)
    # Nothing, or client-id quotas only: ("", client), as before user quotas existed.
    assert QuotaEntities().tags("alice", "app") == Tags("", "app")
    e = QuotaEntities()
    e.set(None, "app", 10.0)
    assert e.resolve("alice", "app") == (Tags("", "app"), 10.0)


def test_the_kinds_configured_stay_after_removal_until_restart() -> None:
    e = QuotaEntities()
    e.set("bob", None, 10.0)
    e.set("bob", None, None)
    assert e.tags("alice", "app") == Tags("alice", "")  # Kafka's quotaTypesEnabled is sticky


def test_limit_of_tags_looks_only_at_the_levels_those_tags_can_match() -> None:
    e = all_levels(static_default=9.0)
    assert e.limit(Tags("carol", "zzz")) == 5.0  # user+client tags: levels 1, 2, 4, 5
    assert e.limit(Tags("carol", "")) == 6.0     # user tags: 3, 6
    assert e.limit(Tags("", "zzz")) == 8.0       # client tags: 7, 8, static
    e.set(None, D, None)
    assert e.limit(Tags("", "zzz")) == 9.0


def test_a_bound_at_long_max_is_unlimited() -> None:
    e = QuotaEntities()
    e.set("alice", None, float(LONG_MAX))
    assert e.resolve("alice", "app") == (Tags("alice", ""), None)


def test_an_entity_needs_a_user_or_a_client() -> None:
    with pytest.raises(ValueError):
        QuotaEntities().set(None, None, 1.0)


def test_byte_rate_manager_meters_under_the_matched_entity() -> None:
    q = ClientQuotaManager("produce", pace_burst_seconds=None)
    q.set_entity_quota("app", 1_000_000)
    q.set_quota("alice", None, 500)
    # ClientQuotaManagerTest's anchor under the user quota: 400 B/s for 10 s, 2300 B at 10.5 s.
    for second in range(10):
        assert q.record("app", 400, second * 1000, user="alice") == 0
    assert q.record("app", 2300, 10_500, user="alice") == 2100
    # Another client id of the same user shares the bucket; another user is on the client quota.
    assert q.record("other", 1, 10_500, user="alice") > 0
    assert q.record("app", 2300, 10_500, user="bob") == 0
    assert set(q.all_tags()) == {Tags("alice", ""), Tags("", "app")}
    assert q.sensor_quota(Tags("alice", "")) == 500
    assert q.throttle_time_avg(Tags("alice", ""), 10_500) > 0
    assert q.rate(Tags("alice", ""), 10_500) > q.rate("app", 10_500)
    # A <user, client> quota takes over with a sensor of its own.
    q.set_quota("alice", "app", 100_000)
    assert q.quota("app", user="alice") == 100_000
    assert q.record("app", 2300, 10_600, user="alice") == 0


def test_mutation_manager_takes_its_rate_from_the_user_levels() -> None:
    m = ControllerMutationQuotaManager(11, 1)
    m.set_entity_quota(D, 100, 0)
    m.set_quota(D, None, 1, 0)  # every user: 1 partition/s, 11 tokens each
    assert m.strict("admin", 12, 0, user="alice") == 0  # admitted, 11 - 12 = -1 token
    assert m.tokens(Tags("alice", ""), 0) == -1
    assert m.strict("admin", 1, 0, user="alice") == 1000  # below zero: refused for 1 s
    assert m.strict("admin", 1, 0, user="bob") == 0       # bob's own bucket
    assert m.quota("admin", user="") == 100               # no principal: the client levels
