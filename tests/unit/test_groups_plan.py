"""broker/tools/groups_plan.py: Kafka 2.8 ConsumerGroupCommand's reset, clamp and describe rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from broker.tools.groups_plan import (
    LogRange,
    MemberView,
    PlanError,
    ResetSpec,
    describe_rows,
    lag_of,
    parse_datetime,
    parse_topic_arg,
    plan_reset,
)
from protocol.consumer_protocol import assignment_partitions

T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)
LOGS = {T0: LogRange(10, 100), T1: LogRange(0, 50), T2: LogRange(5, 5)}


def test_topic_argument_forms():
    assert parse_topic_arg("orders") == ("orders", None)
    assert parse_topic_arg("orders:2,0,2") == ("orders", [0, 2])
    for bad in ("", ":1", "t:x", "t:1,", "t:-1"):
        with pytest.raises(PlanError):
            parse_topic_arg(bad)


@pytest.mark.parametrize("text,ms", [
    ("2024-05-01T12:00:00.000", 1714564800000),  # no zone: UTC, as Kafka's getDateTime
    ("2024-05-01T12:00:00.123Z", 1714564800123),
    ("2024-05-01T14:00:00.000+02:00", 1714564800000),
    ("2024-05-01T14:00:00.000+0200", 1714564800000),
    ("2024-05-01T14:00:00.000+02", 1714564800000),
    ("2024-05-01T07:00:00.000-05:00", 1714564800000),
    ("2024-05-01T12:00:00", 1714564800000),  # milliseconds left out
    ("1970-01-01T00:00:00.001", 1),
])
def test_datetime_forms(text, ms):
    assert parse_datetime(text) == ms


@pytest.mark.parametrize("text", ["2024-05-01", "2024-05-01 12:00:00", "2024-13-01T00:00:00.000", "yesterdayT1"])
def test_datetime_refused(text):
    with pytest.raises(PlanError):
        parse_datetime(text)


def test_earliest_and_latest():
    assert plan_reset(ResetSpec("to-earliest"), [T0, T1], LOGS, {}).offsets == {T0: 10, T1: 0}
    assert plan_reset(ResetSpec("to-latest"), [T0, T1], LOGS, {}).offsets == {T0: 100, T1: 50}


def test_to_offset_is_clamped_with_kafkas_warnings():
    plan = plan_reset(ResetSpec("to-offset", 60), [T0, T1, T2], LOGS, {})
    assert plan.offsets == {T0: 60, T1: 50, T2: 5}
    assert plan.warnings == [
        "New offset (60) is higher than latest offset for topic partition t-1. Value will be set to 50",
        "New offset (60) is higher than latest offset for topic partition t-2. Value will be set to 5",
    ]
    plan = plan_reset(ResetSpec("to-offset", 3), [T0], LOGS, {})
    assert plan.offsets == {T0: 10}
    assert plan.warnings == ["New offset (3) is lower than earliest offset for topic partition t-0. "
                             "Value will be set to 10"]


def test_shift_by_moves_from_the_committed_offset_and_clamps():
    committed = {T0: 40, T1: 45}
    assert plan_reset(ResetSpec("shift-by", -5), [T0, T1], LOGS, committed).offsets == {T0: 35, T1: 40}
    assert plan_reset(ResetSpec("shift-by", 10), [T0, T1], LOGS, committed).offsets == {T0: 50, T1: 50}
    assert plan_reset(ResetSpec("shift-by", -35), [T0], LOGS, committed).offsets == {T0: 10}


def test_shift_by_without_a_committed_offset_is_refused():
    with pytest.raises(PlanError, match="Cannot shift offset for partition t-1 since there is no current committed"):
        plan_reset(ResetSpec("shift-by", 1), [T0, T1], LOGS, {T0: 20})


def test_to_datetime_takes_the_found_offset_else_the_log_end():
    plan = plan_reset(ResetSpec("to-datetime", 1_700_000_000_000), [T0, T1], LOGS, {}, by_time={T0: 42, T1: -1})
    assert plan.offsets == {T0: 42, T1: 50}
    assert plan.warnings == []


def test_unknown_partition_is_an_error():
    with pytest.raises(PlanError, match="t-7"):
        plan_reset(ResetSpec("to-earliest"), [("t", 7)], LOGS, {})


@given(st.integers(-10**6, 10**6), st.integers(0, 1000), st.integers(0, 1000))
def test_clamped_offsets_always_lie_in_the_log(n, start, length):
    log = {T0: LogRange(start, start + length)}
    for spec, committed in ((ResetSpec("to-offset", n), {}), (ResetSpec("shift-by", n), {T0: start})):
        got = plan_reset(spec, [T0], log, committed)
        assert start <= got.offsets[T0] <= start + length
        assert bool(got.warnings) == (got.offsets[T0] != (n if spec.mode == "to-offset" else start + n))


def test_lag():
    assert lag_of(40, 100) == 60
    assert lag_of(None, 100) is None
    assert lag_of(-1, 100) is None
    assert lag_of(40, None) is None


def test_describe_rows_in_kafkas_order():
    members = [
        MemberView("m-small", "c1", "/10.0.0.1", (("t", 2),)),
        MemberView("m-idle", "c3", "/10.0.0.3", ()),
        MemberView("m-big", "c2", "/10.0.0.2", (("u", 1), ("t", 1), ("u", 0))),
    ]
    committed = {("t", 1): 5, ("t", 2): 7, ("u", 0): 3, ("old", 0): 9}
    ends = {("t", 1): 10, ("t", 2): 7, ("u", 0): 3, ("u", 1): 4, ("old", 0): 12}
    rows = [r.cells() for r in describe_rows("g", members, committed, ends)]
    assert rows == [
        # the member with most partitions first, its partitions by number (stable within equal numbers)
        ["g", "u", "0", "3", "3", "0", "m-big", "/10.0.0.2", "c2"],
        ["g", "u", "1", "-", "4", "-", "m-big", "/10.0.0.2", "c2"],
        ["g", "t", "1", "5", "10", "5", "m-big", "/10.0.0.2", "c2"],
        ["g", "t", "2", "7", "7", "0", "m-small", "/10.0.0.1", "c1"],
        # committed but held by no member
        ["g", "old", "0", "9", "12", "3", "-", "-", "-"],
    ]


def test_describe_rows_without_members_or_log_end():
    rows = [r.cells() for r in describe_rows("g", [], {("t", 0): 4}, {})]
    assert rows == [["g", "t", "0", "4", "-", "-", "-", "-", "-"]]


topic_names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=20)


@given(st.dictionaries(topic_names, st.lists(st.integers(0, 2**31 - 1), max_size=8), max_size=6),
       st.none() | st.binary(max_size=20), st.sampled_from([0, 1, 3]))
def test_assignment_decoding_for_the_tool_against_kafka_python(parts, user_data, version):
    # kafka-python's classes are generated from Kafka's ConsumerProtocolAssignment.json (v0-1); a
    # newer version is read with the newest layout, as Kafka's ConsumerProtocol does.
    data = ConsumerProtocolAssignment(version=min(version, 1), assigned_partitions=list(parts.items()),
                                      user_data=user_data).encode(version=min(version, 1))
    data = version.to_bytes(2, "big") + data[2:]
    assert assignment_partitions(data) == parts


def test_assignment_decoding_edges():
    assert assignment_partitions(b"") == {}  # before the member's first SyncGroup
    for bad in (b"\xff\xff\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x05\x00\x01t", b"\x00"):
        assert assignment_partitions(bad) is None
