"""broker/tools/groups_tool.py's decisions and output, with the cluster replaced by a fake admin
(the wire side is tests/integration/test_groups_tool.py's, against real brokers)."""

from __future__ import annotations

import argparse
import asyncio
import io
from typing import Any

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from broker.tools import groups_tool
from broker.tools.cli import build_parser
from broker.tools.group_admin import EARLIEST, LATEST


class FakeAdmin:
    """The calls groups_tool makes on GroupAdmin, answered from fixed state; records commits."""

    def __init__(self, state: str = "Empty", members: list[dict[str, Any]] | None = None) -> None:
        self.state = state
        self.members = members or []
        self.committed_offsets = {("t", 0): 40, ("t", 1): 45}
        self.logs = {("t", 0): (10, 100), ("t", 1): (0, 50)}
        self.commits: list[dict[tuple[str, int], int]] = []

    async def describe(self, group: str) -> dict[str, Any]:
        return {"error_code": 0, "group_id": group, "group_state": self.state, "protocol_type": "consumer",
                "protocol_data": "range", "members": self.members}

    async def committed(self, group: str) -> dict[tuple[str, int], int]:
        return dict(self.committed_offsets)

    async def log_offsets(self, timestamps: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        out = {}
        for tp, ts in timestamps.items():
            if tp in self.logs:
                start, end = self.logs[tp]
                out[tp] = start if ts == EARLIEST else end if ts == LATEST else (start + 5 if ts < 1000 else -1)
        return out

    async def partitions(self, topics: Any) -> dict[str, Any]:
        return {t: [0, 1] if t == "t" else 3 for t in topics}

    async def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        self.commits.append(dict(offsets))
        return {tp: 0 for tp in offsets}

    async def delete_group(self, group: str) -> int:
        return {"busy": 68, "ghost": 69}.get(group, 0)


def parse(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(["groups", "--bootstrap-server", "h:1", *argv])
    args.group = args.group or []
    return args


def outputs() -> tuple[groups_tool.Output, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return groups_tool.Output(groups_tool.console_for(out), groups_tool.console_for(err)), out, err


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def member(member_id: str, parts: tuple[tuple[str, tuple[int, ...]], ...]) -> dict[str, Any]:
    return {"member_id": member_id, "group_instance_id": None, "client_id": "cid", "client_host": "/127.0.0.1",
            "member_metadata": b"", "member_assignment": ConsumerProtocolAssignment(
                version=0, assigned_partitions=[(t, list(ps)) for t, ps in parts], user_data=None).encode(version=0)}


def test_describe_prints_kafkas_columns_and_decoded_assignments() -> None:
    admin = FakeAdmin("Stable", [member("m1", (("t", (1,)),)), member("m0", (("t", (0,)),))])
    output, out, err = outputs()
    assert asyncio.run(groups_tool.describe(admin, ["g"], output)) == 0  # type: ignore[arg-type]
    assert table(out.getvalue()) == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
        ["g", "t", "1", "45", "50", "5", "m1", "/127.0.0.1", "cid"],
        ["g", "t", "0", "40", "100", "60", "m0", "/127.0.0.1", "cid"],
    ]
    assert err.getvalue() == ""


def test_describe_of_an_empty_and_a_missing_group() -> None:
    output, out, err = outputs()
    assert asyncio.run(groups_tool.describe(FakeAdmin("Empty"), ["g"], output)) == 0  # type: ignore[arg-type]
    assert "Consumer group 'g' has no active members." in err.getvalue()
    assert table(out.getvalue())[1] == ["g", "t", "0", "40", "100", "60", "-", "-", "-"]
    output, out, err = outputs()
    assert asyncio.run(groups_tool.describe(FakeAdmin("Dead"), ["g"], output)) == 1  # type: ignore[arg-type]
    assert "Error: Consumer group 'g' does not exist." in err.getvalue()
    assert out.getvalue() == ""


@pytest.mark.parametrize("argv,expected", [
    (("--to-earliest",), {("t", 0): 10, ("t", 1): 0}),
    (("--to-latest",), {("t", 0): 100, ("t", 1): 50}),
    (("--to-offset", "60"), {("t", 0): 60, ("t", 1): 50}),
    (("--shift-by", "-5"), {("t", 0): 35, ("t", 1): 40}),
    (("--to-datetime", "1970-01-01T00:00:00.500"), {("t", 0): 15, ("t", 1): 5}),
    (("--to-datetime", "1970-01-01T00:00:01.000Z"), {("t", 0): 100, ("t", 1): 50}),
])
def test_reset_modes_dry_run_and_execute(argv: tuple[str, ...], expected: dict[tuple[str, int], int]) -> None:
    for how in ("--dry-run", "--execute"):
        admin = FakeAdmin("Empty")
        output, out, _ = outputs()
        args = parse("--reset-offsets", "--group", "g", "--topic", "t", how, *argv)
        assert asyncio.run(groups_tool.reset_offsets(admin, args, output)) == 0  # type: ignore[arg-type]
        rows = table(out.getvalue())
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
        assert {("t", int(r[2])): int(r[3]) for r in rows[1:]} == expected
        assert admin.commits == ([expected] if how == "--execute" else [])


def test_reset_of_one_partition_warns_on_clamp() -> None:
    admin = FakeAdmin("Dead")  # no group yet: a reset creates its offsets, as in Kafka
    output, out, err = outputs()
    args = parse("--reset-offsets", "--group", "g", "--topic", "t:1", "--to-offset", "70", "--execute")
    assert asyncio.run(groups_tool.reset_offsets(admin, args, output)) == 0  # type: ignore[arg-type]
    assert admin.commits == [{("t", 1): 50}]
    assert "WARN: New offset (70) is higher than latest offset for topic partition t-1. Value will be set to 50" \
        in err.getvalue()


def test_reset_is_refused_while_the_group_is_active() -> None:
    admin = FakeAdmin("Stable", [member("m0", (("t", (0, 1)),))])
    output, out, err = outputs()
    args = parse("--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--execute")
    assert asyncio.run(groups_tool.reset_offsets(admin, args, output)) == 1  # type: ignore[arg-type]
    assert admin.commits == []
    assert ("Error: Assignments can only be reset if the group 'g' is inactive, but the current state is Stable."
            in err.getvalue())
    assert out.getvalue() == ""


def test_run_refuses_bad_combinations_before_connecting() -> None:
    for argv, message in ((("--list", "--describe"), "exactly one action"),
                          (("--describe",), "needs --group"),
                          (("--describe", "--group", "g", "--topic", "t"), "--topic goes with")):
        output, _, err = outputs()
        assert asyncio.run(groups_tool.run(parse(*argv), output)) == 1
        assert message in err.getvalue()


def test_reset_spec_needs_exactly_one_mode() -> None:
    with pytest.raises(groups_tool.PlanError):
        groups_tool.reset_spec(parse("--reset-offsets", "--to-earliest", "--to-latest"))
    with pytest.raises(groups_tool.PlanError):
        groups_tool.reset_spec(parse("--reset-offsets"))


def test_reset_of_an_unknown_topic_commits_nothing() -> None:
    admin = FakeAdmin("Empty")
    output, out, err = outputs()
    args = parse("--reset-offsets", "--group", "g", "--topic", "nosuch", "--to-earliest", "--execute")
    with pytest.raises(groups_tool.AdminError, match="topic 'nosuch': UNKNOWN_TOPIC_OR_PARTITION"):
        asyncio.run(groups_tool.reset_offsets(admin, args, output))  # type: ignore[arg-type]
    assert admin.commits == []


def test_delete_reports_each_group_as_kafkas_tool_does() -> None:
    output, out, _ = outputs()
    assert asyncio.run(groups_tool.delete_groups(FakeAdmin(), ["a", "b"], output)) == 0  # type: ignore[arg-type]
    assert out.getvalue() == "Deletion of requested consumer groups ('a', 'b') was successful.\n"
    output, out, err = outputs()
    assert asyncio.run(groups_tool.delete_groups(FakeAdmin(), ["busy", "a", "ghost"], output)) == 1  # type: ignore[arg-type]
    assert "Error: Deletion of some consumer groups failed:" in err.getvalue()
    assert out.getvalue().splitlines() == [
        "* Group 'busy' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty.",
        "* Group 'ghost' could not be deleted due to: GROUP_ID_NOT_FOUND: The group id does not exist.",
        "",
        "These consumer groups were deleted successfully: 'a'",
    ]
