"""The assignment znode's size, computed before any assignment exists (broker.apis.assignment_bounds),
and the sliced encoding that must give layout.encode_assignment's bytes exactly."""

from __future__ import annotations

import time

import pytest

from broker.apis import assignment_bounds as B
from broker.apis.admin import assign_replicas, encode_assignment_async
from broker.zk import layout as L


def test_digits_sum_matches_counting() -> None:
    for start, stop in [(0, 0), (0, 1), (0, 10), (7, 123), (95, 10_005), (999, 1001)]:
        assert B.digits_sum(start, stop) == sum(len(str(i)) for i in range(start, stop))


@pytest.mark.parametrize("count,rf,brokers", [(1, 1, [0]), (37, 2, [0, 1, 2]), (5000, 3, [1, 2, 3, 4])])
def test_computed_size_bounds_the_encoded_znode(count: int, rf: int, brokers: list[int]) -> None:
    encoded = L.encode_assignment(assign_replicas(brokers, count, rf))
    assert len(encoded) <= B._HEAD + B.entries_size(0, count, rf, 1) <= len(encoded) + 1  # the last comma
    given = list(assign_replicas(brokers, count, rf).values())
    assert B.given_too_large("t", 0, given) is None


def test_seven_million_partitions_refused_at_once() -> None:
    t0 = time.monotonic()
    why = B.chosen_too_large("t", 0, 7_000_000, 1, [0])
    assert why is not None and "7000000 partitions" in why
    assert B.chosen_too_large("t", 0, 2**31 - 1, 3, [0, 1, 2]) is not None
    assert time.monotonic() - t0 < 0.5


def test_boundary_is_the_znode_limit() -> None:
    n = 1
    while B.chosen_too_large("t", 0, n * 2, 1, [0]) is None:
        n *= 2
    lo, hi = n, n * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if B.chosen_too_large("t", 0, mid, 1, [0]) is None else (lo, mid)
    assert len(L.encode_assignment(assign_replicas([0], lo, 1))) <= B.ZNODE_MAX_BYTES
    assert len(L.encode_assignment(assign_replicas([0], hi, 1))) + 1 > B.ZNODE_MAX_BYTES


def test_growth_counts_the_existing_znode() -> None:
    existing = len(L.encode_assignment(assign_replicas([0], 50_000, 1)))
    assert B.chosen_too_large("t", 50_000, 100, 1, [0], existing) is None
    assert B.chosen_too_large("t", 50_000, 2_000_000, 1, [0], existing) is not None
    assert B.given_too_large("t", 50_000, [[0]] * 100_000, existing) is not None


async def test_sliced_encoding_is_byte_identical() -> None:
    for count in (3, 2000, 12_345):
        a = assign_replicas([0, 1, 2], count, 2)
        assert await encode_assignment_async(a) == L.encode_assignment(a)
