"""The follower's Fetch request under a KIP-73 throttle: who is asked, for how much, how long to wait."""

from __future__ import annotations

import random
from typing import Any

from fetcher.replica_fetcher import (
    MIN_THROTTLED_FETCH,
    THROTTLE_POLL_S,
    FetcherSettings,
    FetchPlan,
    ReplicaFetcher,
)
from protocol.api_keys import ApiKey
from protocol.schema import request_codec


class Sink:
    def log_end_offset(self, tp: tuple[str, int]) -> int:
        return 0

    def log_end_offsets(self, tps: list[tuple[str, int]]) -> list[int | None]:
        return [0 for _ in tps]


class Throttle:
    """A follower budget of `budget` bytes; partitions in `lagging` are throttled and not in sync."""

    def __init__(self, budget: float, lagging: set[tuple[str, int]], exceeded: bool = False) -> None:
        self._budget, self.lagging, self.exceeded, self.reserved = budget, lagging, exceeded, 0

    def any_throttled(self) -> bool:
        return bool(self.lagging)

    def leave_out(self, tp: tuple[str, int]) -> bool:
        return tp in self.lagging and self.exceeded

    def limited(self, tp: tuple[str, int]) -> bool:
        return tp in self.lagging

    def budget(self) -> float:
        return self._budget

    def reserve(self, nbytes: int) -> None:
        self.reserved += nbytes

    def release(self, nbytes: int) -> None:
        self.reserved -= nbytes


def fetcher(throttle: Throttle) -> ReplicaFetcher:
    f = ReplicaFetcher("h", 1, 0, FetcherSettings(replica_id=2, max_wait_ms=500), Sink(), throttle, random.Random(1))
    for tp in [("t", 0), ("t", 1), ("t", 2)]:
        f.add(tp)
    f.truncating.clear()  # as after the leader-epoch truncation (tests/unit/test_follower_truncation.py)
    return f


def decoded(plan: FetchPlan | None) -> dict[str, Any]:
    """The request as it goes on the wire, read back by the schema codec."""
    assert plan is not None
    return request_codec(ApiKey.FETCH, 3).decode(plan.body)


def asked(plan: FetchPlan | None) -> dict[tuple[str, int], int]:
    request = decoded(plan)
    return {(t["topic"], p["partition"]): p["partition_max_bytes"] for t in request["topics"] for p in t["partitions"]}


def test_with_budget_every_partition_is_asked_and_the_request_long_polls() -> None:
    req = fetcher(Throttle(10 << 20, {("t", 0), ("t", 1)})).build_request(now=1.0)
    assert set(asked(req)) == {("t", 0), ("t", 1), ("t", 2)}
    assert decoded(req)["max_wait_ms"] == 500


def test_left_out_throttled_partitions_do_not_wait_a_whole_long_poll() -> None:
    # ("t", 2) is in sync, so the request still goes out; the throttled two are left out
    # (quota exceeded) and must be asked again within THROTTLE_POLL_S, not after 500 ms.
    f = fetcher(Throttle(0, {("t", 0), ("t", 1)}, exceeded=True))
    req = f.build_request(now=1.0)
    assert set(asked(req)) == {("t", 2)}
    assert decoded(req)["max_wait_ms"] == int(THROTTLE_POLL_S * 1000)


def test_budget_is_shared_out_and_crumbs_are_not_asked_for() -> None:
    throttle = Throttle(MIN_THROTTLED_FETCH + 100, {("t", 0), ("t", 1)})
    req = fetcher(throttle).build_request(now=1.0)
    sizes = asked(req)
    throttled = {tp: n for tp, n in sizes.items() if tp in throttle.lagging}
    assert len(throttled) == 1 and sum(throttled.values()) == MIN_THROTTLED_FETCH + 100  # the rest is a crumb
    assert throttle.reserved == MIN_THROTTLED_FETCH + 100
    assert decoded(req)["max_wait_ms"] == int(THROTTLE_POLL_S * 1000)
