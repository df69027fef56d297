"""The follower's truncation by leader epoch (fetcher.truncation, ReplicaFetcher's truncating step).

The leader is simulated by a LeaderEpochCache answering as the broker's handler does; the
follower's log is a sink whose epochs are another cache and whose log is only its end offset.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from broker.log.leader_epoch_cache import LeaderEpochCache
from fetcher.replica_fetcher import FetcherSettings, ReplicaFetcher
from fetcher.truncation import Truncation, truncation_for
from protocol.errors import ErrorCode

TP = ("t", 0)


def own(entries: list[tuple[int, int]], leo: int):  # noqa: ANN201
    cache = LeaderEpochCache(entries)

    def end_for(epoch: int) -> tuple[int, int] | None:
        found, end = cache.end_offset_for(epoch, leo)
        return None if end == -1 else (found, end)
    return end_for


def test_undefined_end_offset_falls_back_to_the_high_watermark() -> None:
    assert truncation_for(-1, -1, high_watermark=7, log_end_offset=12, own_end_offset_for=own([(0, 0)], 12)) \
        == Truncation(7, True)


def test_same_epoch_cuts_to_the_smaller_end() -> None:
    f = own([(0, 0), (2, 6)], 12)
    assert truncation_for(2, 10, high_watermark=3, log_end_offset=12, own_end_offset_for=f) == Truncation(10, True)
    # The leader's epoch runs further than our log: nothing to cut (never above our end).
    assert truncation_for(2, 40, high_watermark=3, log_end_offset=12, own_end_offset_for=f) == Truncation(12, True)


def test_epoch_unknown_to_the_follower_cuts_and_asks_again() -> None:
    # KIP-279: the leader answers epoch 2, which we never had: cut to the end of our largest epoch below it.
    f = own([(0, 0), (1, 5), (3, 8)], 12)
    assert truncation_for(2, 10, high_watermark=3, log_end_offset=12, own_end_offset_for=f) == Truncation(8, False)


def test_all_our_epochs_above_the_answer_cut_to_where_they_start() -> None:
    # Our log is all epoch 4, the leader's latest epoch <= 4 is 1: none of our data is the leader's.
    f = own([(4, 3)], 12)
    assert truncation_for(1, 9, high_watermark=3, log_end_offset=12, own_end_offset_for=f) == Truncation(3, True)


def test_no_epoch_of_ours_to_compare_cuts_to_the_leaders_end() -> None:
    assert truncation_for(1, 9, high_watermark=3, log_end_offset=12, own_end_offset_for=lambda e: None) \
        == Truncation(9, True)


def test_v0_answer_without_epoch_takes_the_leaders_offset() -> None:
    assert truncation_for(-1, 9, high_watermark=3, log_end_offset=12, own_end_offset_for=own([], 12)) \
        == Truncation(9, True)


class Sink:
    """One follower partition: a log end offset, a high watermark and its epochs."""

    def __init__(self, epochs: list[tuple[int, int]], leo: int, hw: int, current_epoch: int = 5) -> None:
        self.cache = LeaderEpochCache(epochs)
        self.leo, self.hw, self.current = leo, hw, current_epoch
        self.cuts: list[int] = []

    def log_end_offset(self, tp: Any) -> int:  # noqa: ANN401
        return self.leo

    def log_end_offsets(self, tps: list[Any]) -> list[int | None]:
        return [self.leo for _ in tps]

    def truncate_to(self, tp: Any, offset: int) -> None:  # noqa: ANN401
        self.cuts.append(offset)
        self.leo = min(self.leo, offset)
        self.hw = min(self.hw, self.leo)
        self.cache.truncate_from_end(self.leo)

    def latest_epoch(self, tp: Any) -> int | None:  # noqa: ANN401
        return self.cache.latest_epoch

    def current_leader_epoch(self, tp: Any) -> int:  # noqa: ANN401
        return self.current

    def end_offset_for_epoch(self, tp: Any, epoch: int) -> tuple[int, int] | None:  # noqa: ANN401
        found, end = self.cache.end_offset_for(epoch, self.leo)
        return None if end == -1 else (found, end)

    def high_watermark(self, tp: Any) -> int:  # noqa: ANN401
        return self.hw


def fetcher_for(sink: Sink, leader: LeaderEpochCache, leader_leo: int, leader_epoch: int = 5,
                error: ErrorCode = ErrorCode.NONE) -> tuple[ReplicaFetcher, list[Any]]:
    f = ReplicaFetcher("h", 1, 0, FetcherSettings(replica_id=2, backoff_ms=0), sink, None, random.Random(1))  # type: ignore[arg-type]
    asked: list[Any] = []

    async def connection() -> None:
        return None

    async def offsets(conn: Any, asking: dict) -> dict:  # noqa: ANN401
        asked.append(dict(asking))
        out = {}
        for tp, (current, epoch) in asking.items():
            if error != ErrorCode.NONE:
                out[tp] = (error, -1, -1)
            elif current < leader_epoch:
                out[tp] = (ErrorCode.FENCED_LEADER_EPOCH, -1, -1)
            else:
                out[tp] = (ErrorCode.NONE, *leader.end_offset_for(epoch, leader_leo))
        return out
    f._connection = connection  # type: ignore[method-assign]
    f._offsets_for_leader_epoch = offsets  # type: ignore[method-assign]
    f.add(TP)
    return f, asked


async def settle(f: ReplicaFetcher, rounds: int = 5) -> None:
    for _ in range(rounds):
        if not f.truncating:
            return
        await f._truncate_all()


async def test_kip_101_the_follower_keeps_what_its_epoch_holds_above_its_high_watermark() -> None:
    # The follower has 0-9 of epoch 3 but its high watermark says 6; the new leader (epoch 4
    # from 10) has all of epoch 3. Kafka 0.10 would cut to 6 and lose 6-9 if the leader then died.
    sink = Sink([(3, 0)], leo=10, hw=6)
    f, asked = fetcher_for(sink, LeaderEpochCache([(3, 0), (4, 10)]), leader_leo=15)
    await settle(f)
    assert asked == [{TP: (5, 3)}]
    assert sink.leo == 10 and not f.truncating
    assert f.build_request(now=1e9) is not None  # and it fetches again


async def test_kip_279_iterates_when_the_leader_answers_an_epoch_the_follower_lacks() -> None:
    sink = Sink([(0, 0), (1, 5), (3, 8)], leo=12, hw=2)
    # The leader never had epochs 1 and 3 (another broker led them, briefly, and lost them).
    f, asked = fetcher_for(sink, LeaderEpochCache([(0, 0), (2, 6), (4, 10)]), leader_leo=14)
    await settle(f)
    assert [a[TP][1] for a in asked] == [3, 1]  # asked for epoch 3, then (after a cut to 8) for epoch 1
    assert sink.cuts == [8, 5]
    assert sink.leo == 5 and not f.truncating


async def test_a_log_without_epochs_truncates_to_its_high_watermark_without_asking() -> None:
    sink = Sink([], leo=10, hw=6)
    f, asked = fetcher_for(sink, LeaderEpochCache([(3, 0)]), leader_leo=15)
    await settle(f)
    assert asked == [] and sink.leo == 6 and not f.truncating


async def test_a_leader_without_the_epoch_answers_undefined_and_the_high_watermark_decides() -> None:
    sink = Sink([(3, 0)], leo=10, hw=6)
    f, _ = fetcher_for(sink, LeaderEpochCache(), leader_leo=15)
    await settle(f)
    assert sink.leo == 6 and not f.truncating


@pytest.mark.parametrize("error", [ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_FOR_PARTITION,
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
async def test_errors_keep_the_partition_truncating_and_cut_nothing(error: ErrorCode) -> None:
    sink = Sink([(3, 0)], leo=10, hw=6)
    f, asked = fetcher_for(sink, LeaderEpochCache([(3, 0)]), leader_leo=15, error=error)
    await settle(f, rounds=2)
    assert len(asked) == 2 and sink.cuts == [] and f.truncating == {TP}
    assert f.build_request(now=1e9) is None  # not fetched before it is truncated


async def test_a_fenced_follower_waits_for_its_new_leader_and_isr() -> None:
    sink = Sink([(3, 0)], leo=10, hw=6, current_epoch=4)
    f, _ = fetcher_for(sink, LeaderEpochCache([(3, 0)]), leader_leo=15, leader_epoch=5)
    await settle(f, rounds=1)
    assert sink.cuts == [] and f.truncating == {TP}


async def test_an_answer_for_an_older_assignment_is_ignored() -> None:
    sink = Sink([(3, 0)], leo=10, hw=6)
    leader = LeaderEpochCache([(2, 0)])
    f, _ = fetcher_for(sink, leader, leader_leo=4)
    original = f._offsets_for_leader_epoch

    async def slow(conn: Any, asking: dict) -> dict:  # noqa: ANN401
        answer = await original(conn, asking)
        sink.current = 6  # a new LeaderAndIsr arrived while the request was out
        return answer
    f._offsets_for_leader_epoch = slow  # type: ignore[method-assign]
    await f._truncate_all()
    assert sink.cuts == [] and f.truncating == {TP}


def test_run_loop_is_not_needed_for_these_tests() -> None:
    # _truncate_all is driven directly above; the loop only calls it before each fetch.
    assert asyncio.iscoroutinefunction(ReplicaFetcher._truncate_all)
