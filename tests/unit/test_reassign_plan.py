"""Reassignment plans (parsing, validation, Kafka's throttle lists, KIP-73 estimates) and the leftover-throttle watch."""

from __future__ import annotations

import json

import pytest

from broker.controller.reassign_plan import (
    PlanError,
    format_reassignment,
    merge_list,
    move_ratio,
    move_time,
    parse_reassignment,
    remove_from_list,
    throttle_lists,
    validate,
)
from broker.replication.leftover_throttles import LeftoverThrottleWatch


def doc(*items: tuple[str, int, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in items]})


def test_parse_and_format_round_trip() -> None:
    plan = parse_reassignment(doc(("t", 1, [3, 2]), ("t", 0, [1])))
    assert plan == {("t", 1): [3, 2], ("t", 0): [1]}
    assert parse_reassignment(format_reassignment(plan)) == plan


@pytest.mark.parametrize("text, needle", [
    ("not json", "not valid JSON"),
    ('{"partitions": 3}', "must be"),
    (doc(("t", 0, [1, 1])), "duplicate replicas"),
    (doc(("t", 0, [])), "non-empty list"),
    (doc(("t", -1, [1])), "valid partition"),
    (doc(("t", 0, [1]), ("t", 0, [2])), "more than once"),
    (json.dumps({"version": 1, "partitions": []}), "no partitions"),
])
def test_malformed_plans_are_refused(text: str, needle: str) -> None:
    with pytest.raises(PlanError, match=needle):
        parse_reassignment(text)


def test_validate_names_unknown_topics_partitions_and_brokers() -> None:
    current = {("t", 0): [1], ("t", 1): [2]}
    validate({("t", 0): [2, 3]}, current, [1, 2, 3])
    with pytest.raises(PlanError, match="topic 'x' does not exist"):
        validate({("x", 0): [1]}, current, [1, 2])
    with pytest.raises(PlanError, match="partition t-5 does not exist"):
        validate({("t", 5): [1]}, current, [1, 2])
    with pytest.raises(PlanError, match=r"broker\(s\) \[7\]"):
        validate({("t", 0): [7]}, current, [1, 2])


def test_throttle_lists_follow_kafka_tool() -> None:
    # kafka-behaviour.md §7: 101,102 -> 102,103 gives leader p:101,p:102 and follower p:103.
    lists = throttle_lists({("t", 0): [102, 103], ("t", 1): [101, 102]}, {("t", 0): [101, 102], ("t", 1): [101, 102]})
    assert lists.leader_value("t") == "0:101,0:102"
    assert lists.follower_value("t") == "0:103"
    assert lists.brokers == [101, 102, 103]
    assert merge_list("1:5", ["0:101", "1:5"]) == "1:5,0:101"
    assert merge_list("*", ["0:1"]) == "*"
    assert remove_from_list("0:1,1:2", ["0:1"]) == "1:2"


def test_move_ratio_and_move_time() -> None:
    current = {("t", p): [0] for p in range(4)}
    assert move_ratio({("t", 0): [1], ("t", 1): [1]}, current) == 0.5
    est = move_time({1: 40e6, 2: 10e6}, {1: 1e6}, 5e6)
    assert est.busiest_broker == 1 and est.seconds == pytest.approx(10.0)
    stuck = move_time({1: 40e6}, {1: 5e6}, 5e6)
    assert stuck.seconds is None and stuck.busiest_broker == 1 and stuck.needed_rate == 5e6


def test_leftover_watch_warns_after_grace_and_repeats_per_period() -> None:
    w = LeftoverThrottleWatch(grace_ms=1000, now_ms=0)
    assert not w.observe(throttling=True, reassigning=True, now_ms=500)
    assert not w.observe(True, False, 1000)  # the move ended at 1000: grace starts now
    assert not w.observe(True, False, 1900)
    assert w.observe(True, False, 2000)
    assert not w.observe(True, False, 2500)
    assert w.observe(True, False, 3000)
    assert not w.observe(False, False, 5000)  # removed: nothing to say
    assert not w.observe(True, True, 6000)  # a new move


def test_watch_report_warns_when_the_throttle_cannot_beat_the_inbound_rate() -> None:
    from broker.tools.reassign_tool import Snapshot, progress_line

    first = Snapshot(0.0, remaining={1: 40e6}, copied=0, inbound={1: 1e6}, throttle={1: 5e6},
                     sending={0: 40e6}, leader_inbound={0: 1e6})
    cur = Snapshot(2.0, remaining={1: 32e6}, copied=8e6, lag=8000, inbound={1: 1e6}, throttle={1: 5e6},
                   throttled_rate=4.9e6, sending={0: 32e6}, leader_inbound={0: 1e6})
    lines = progress_line(first, first, cur, 20, 0)
    assert "20.0%" in lines[0] and "32.00 MB remaining" in lines[0] and "SumReplicaLag 8000" in lines[0]
    assert lines[1].startswith("ETA 8 s by KIP-73's MoveTime")  # 32 MB / (5 - 1) MB/s
    assert "8 s at the measured progress" in lines[1]  # 8 MB in 2 s: 4 MB/s

    stuck = Snapshot(4.0, remaining={1: 32e6}, copied=8e6, inbound={1: 6e6}, throttle={1: 5e6},
                     sending={0: 32e6}, leader_inbound={0: 6e6})
    warning = progress_line(first, cur, stuck, 20, 0)[1]
    assert warning.startswith("WARNING: the throttle 5.00 MB/s on broker")
    assert "cannot finish" in warning and "--throttle above 6000000" in warning
