"""The replica fetcher's handling of a Fetch response (ReplicaFetcher._handle): what reaches the sink.

An idle partition's answer (no records) carries only the leader's high watermark; the same answer
at the same offset again changes nothing and is not passed on, but anything else is: a new high
watermark, an answer after an append, a truncation, or the partition re-added."""

from __future__ import annotations

import random
from typing import Any

from fetcher.replica_fetcher import FetcherSettings, FetchPlan, ReplicaFetcher
from protocol.errors import ErrorCode

A, B = ("t", 0), ("t", 1)


class Sink:
    def __init__(self) -> None:
        self.leo: dict[tuple[str, int], int] = {A: 10, B: 20}
        self.appends: list[tuple[tuple[str, int], bytes, int]] = []
        self.cuts: list[tuple[tuple[str, int], int]] = []

    def log_end_offset(self, tp: tuple[str, int]) -> int | None:
        return self.leo.get(tp)

    def log_end_offsets(self, tps: list[tuple[str, int]]) -> list[int | None]:
        return [self.leo.get(tp) for tp in tps]

    def append(self, tp: tuple[str, int], records: Any, leader_hw: int) -> int:  # noqa: ANN401
        self.appends.append((tp, bytes(records), leader_hw))
        if records:
            self.leo[tp] += 1
        return len(records)

    def truncate_to(self, tp: tuple[str, int], offset: int) -> None:
        self.cuts.append((tp, offset))
        self.leo[tp] = min(self.leo[tp], offset)


def fetcher(sink: Sink) -> ReplicaFetcher:
    f = ReplicaFetcher("h", 1, 0, FetcherSettings(replica_id=2), sink, None, random.Random(1))  # type: ignore[arg-type]
    for tp in (A, B):
        f.add(tp)
    f.truncating.clear()  # as after the leader-epoch truncation
    return f


def plan(f: ReplicaFetcher) -> FetchPlan:
    p = f.build_request(now=1.0)
    assert p is not None
    return p


def idle(tp: tuple[str, int], hw: int, code: int = 0) -> tuple[str, int, int, int, memoryview]:
    return (tp[0], tp[1], code, hw, memoryview(b""))


def test_an_idle_answer_is_passed_on_once_per_offset_and_high_watermark() -> None:
    sink = Sink()
    f = fetcher(sink)
    f._handle(plan(f), [idle(A, 10), idle(B, 18)])
    assert sink.appends == [(A, b"", 10), (B, b"", 18)]
    f._handle(plan(f), [idle(A, 10), idle(B, 18)])
    assert len(sink.appends) == 2  # the same answers again: nothing new
    f._handle(plan(f), [idle(A, 10), idle(B, 19)])
    assert sink.appends[2:] == [(B, b"", 19)]


def test_after_an_append_a_truncation_or_a_re_add_the_idle_answer_is_passed_on_again() -> None:
    sink = Sink()
    f = fetcher(sink)
    f._handle(plan(f), [idle(A, 10)])
    f._handle(plan(f), [("t", 0, 0, 11, memoryview(b"x"))])  # one entry: the log end moves to 11
    assert sink.appends == [(A, b"", 10), (A, b"x", 11)]
    f._handle(plan(f), [idle(A, 11)])
    assert sink.appends[2:] == [(A, b"", 11)]
    # Cut back to 10 and the entry fetched again: an idle answer at 11 with the leader's
    # high watermark as before is news again (the cut lowered ours).
    f._cut(A, 10, "test")
    f._handle(plan(f), [("t", 0, 0, 9, memoryview(b"x"))])
    f._handle(plan(f), [idle(A, 11)])
    assert sink.appends[3:] == [(A, b"x", 9), (A, b"", 11)]
    f.remove(A)
    f.add(A)
    f.truncating.clear()
    f._handle(plan(f), [idle(A, 11)])
    assert sink.appends[5:] == [(A, b"", 11)]


def test_answers_for_partitions_not_asked_removed_or_moved_are_dropped() -> None:
    sink = Sink()
    f = fetcher(sink)
    p = plan(f)
    f.remove(B)
    sink.leo[A] = 12  # moved while the request was out
    f._handle(p, [idle(A, 10), idle(B, 18), idle(("u", 0), 3), ("t", 0, 0, 11, memoryview(b"x"))])
    assert sink.appends == []


def test_errors_back_off_the_partition_and_out_of_range_is_reported() -> None:
    sink = Sink()
    f = fetcher(sink)
    assert f._handle(plan(f), [idle(A, 10, ErrorCode.NOT_LEADER_FOR_PARTITION), idle(B, 18)]) is False
    assert f.partitions[A] > 1.0 and f.partitions[B] == 0.0
    assert sink.appends == [(B, b"", 18)]
    f.partitions[A] = 0.0
    assert f._handle(plan(f), [idle(A, 10, ErrorCode.OFFSET_OUT_OF_RANGE)]) is True
    assert sink.appends == [(B, b"", 18)]
