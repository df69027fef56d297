"""`minibroker groups`: kafka-consumer-groups.sh on the wire (Kafka 2.8's ConsumerGroupCommand).

--list                  every group of protocol type "consumer" or "" (simple consumers that only
                        commit), one per line, from ListGroups on every broker.
--describe --group G    GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST
                        CLIENT-ID: members (assignments decoded from the consumer protocol's
                        bytes) with their partitions, then committed partitions no member holds.
                        An Empty group is noted on stderr, a rebalancing one warned about; a
                        group that does not exist is an error.
--reset-offsets --group G (--topic T[:P[,P]] ... | --all-topics)
    (--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime ISO)
    (--dry-run | --execute)
                        prints GROUP TOPIC PARTITION NEW-OFFSET; --execute commits them. Refused
                        unless the group is Empty or Dead (no group yet), as Kafka's tool does;
                        --to-offset and --shift-by are clamped into [log start, log end] with
                        Kafka's warning. Without either --dry-run or --execute it warns and plans
                        only, as Kafka does.
--delete --group G      DeleteGroups (refused by the coordinator while the group has members).
--delete-offsets --group G --topic T[:P[,P]]
                        OffsetDelete; prints TOPIC PARTITION STATUS.

Departures from Kafka's tool: every error exits 1 (Kafka's exits 0 after most of them), and
`--timeout` (ms) defaults to 30000 rather than 5000 so a first use, which creates
`__consumer_offsets`, has time to elect its leaders. Tables are rich tables; into a pipe or a
file they are plain text without colour, at their natural width. The pure rules are in
groups_plan.py, the wire calls in group_admin.py.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.table import Table

from broker.tools.group_admin import EARLIEST, LATEST, AdminError, GroupAdmin, TopicPartition, error_name
from broker.tools.groups_plan import (
    DESCRIBE_COLUMNS,
    LogRange,
    MemberView,
    PlanError,
    ResetSpec,
    describe_rows,
    parse_datetime,
    parse_topic_arg,
    plan_reset,
)
from broker.tools.tool_support import ToolError, add_command_config, command_config
from protocol.consumer_protocol import assignment_partitions

CONSUMER_PROTOCOL = "consumer"
GROUP_ID_NOT_FOUND = 69
INACTIVE_STATES = ("Empty", "Dead")
ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")


def _is_tty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def console_for(stream: Any) -> Console:
    """A terminal gets rich's colours and its width; a pipe or file plain text at natural width.

    A real terminal, not only rich's opinion: FORCE_COLOR would make rich treat a pipe as one.
    """
    if _is_tty(stream):
        return Console(file=stream, highlight=False)
    return Console(file=stream, highlight=False, color_system=None, width=1 << 16, soft_wrap=True)


class Output:
    def __init__(self, out: Console | None = None, err: Console | None = None) -> None:
        self.out = out or console_for(sys.stdout)
        self.err = err or console_for(sys.stderr)

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 2, 0, 0))
        for c in columns:
            table.add_column(c, no_wrap=True)
        for r in rows:
            table.add_row(*r)
        self.out.print()
        self.out.print(table)

    def line(self, text: str = "") -> None:
        self.out.print(text, markup=False)

    def note(self, text: str) -> None:
        self.err.print(text, markup=False)

    def error(self, text: str) -> int:
        self.err.print(f"Error: {text}", markup=False, style="bold red")
        return 1

    @contextmanager
    def progress(self, text: str) -> Iterator[None]:
        """A spinner on a terminal's stderr while the cluster is asked; nothing elsewhere."""
        if self.err.is_terminal and _is_tty(self.err.file):
            with self.err.status(text):
                yield
        else:
            yield


def _members(group: str, desc: dict[str, Any], out: Output) -> list[MemberView]:
    members = []
    for m in desc["members"]:
        decoded = assignment_partitions(m["member_assignment"]) if desc["protocol_type"] == CONSUMER_PROTOCOL else {}
        if decoded is None:
            out.note(f"Warning: member {m['member_id']} of group '{group}' has an unreadable assignment")
            decoded = {}
        parts = tuple((topic, p) for topic, ps in decoded.items() for p in ps)
        members.append(MemberView(m["member_id"], m["client_id"], m["client_host"], parts))
    return members


def _group_state(desc: dict[str, Any]) -> str:
    return "Dead" if desc["error_code"] == GROUP_ID_NOT_FOUND else desc["group_state"]


def _check_described(group: str, desc: dict[str, Any]) -> None:
    if desc["error_code"] not in (0, GROUP_ID_NOT_FOUND):
        raise AdminError(f"DescribeGroups of '{group}': {error_name(desc['error_code'])}")


async def describe(admin: GroupAdmin, groups: list[str], out: Output) -> int:
    status = 0
    for group in groups:
        with out.progress(f"Describing group {group}..."):
            desc = await admin.describe(group)
            _check_described(group, desc)
            state = _group_state(desc)
            committed = await admin.committed(group) if state != "Dead" else {}
            members = _members(group, desc, out)
            tps = set(committed) | {tp for m in members for tp in m.partitions}
            ends = await admin.log_offsets({tp: LATEST for tp in tps})
        rows = describe_rows(group, members, committed, ends)
        if state == "Dead":
            status = out.error(f"Consumer group '{group}' does not exist.")
            continue
        if state == "Empty":
            out.note(f"\nConsumer group '{group}' has no active members.")
        elif state in ("PreparingRebalance", "CompletingRebalance"):
            out.note(f"\nWarning: Consumer group '{group}' is rebalancing.")
        if rows:
            out.table(DESCRIBE_COLUMNS, [r.cells() for r in rows])
    return status


async def list_groups(admin: GroupAdmin, out: Output) -> int:
    with out.progress("Listing groups..."):
        groups = await admin.list_groups()
    for group, protocol_type in groups:
        if protocol_type in (CONSUMER_PROTOCOL, ""):
            out.line(group)
    return 0


async def _partitions_of(admin: GroupAdmin, topic_args: list[str]) -> tuple[list[TopicPartition], dict[str, int]]:
    """The partitions `--topic` names; topics that do not exist are returned with their error."""
    parsed = [parse_topic_arg(a) for a in topic_args]
    whole = [t for t, ps in parsed if ps is None]
    known = await admin.partitions(whole) if whole else {}
    out: list[TopicPartition] = []
    missing: dict[str, int] = {}
    for topic, ps in parsed:
        if ps is None:
            found = known[topic]
            if isinstance(found, int):
                missing[topic] = found
                continue
            ps = found
        out.extend((topic, p) for p in ps)
    return sorted(set(out)), missing


def reset_spec(args: argparse.Namespace) -> ResetSpec:
    given = [m for m in ("to_earliest", "to_latest") if getattr(args, m)]
    given += [m for m in ("to_offset", "shift_by", "to_datetime") if getattr(args, m) is not None]
    if len(given) != 1:
        raise PlanError("--reset-offsets takes exactly one of --to-earliest, --to-latest, --to-offset, "
                        "--shift-by, --to-datetime")
    mode = given[0]
    if mode == "to_datetime":
        return ResetSpec("to-datetime", parse_datetime(args.to_datetime))
    value = getattr(args, mode) if mode in ("to_offset", "shift_by") else None
    return ResetSpec(mode.replace("_", "-"), value)


async def reset_offsets(admin: GroupAdmin, args: argparse.Namespace, out: Output) -> int:
    spec = reset_spec(args)
    if bool(args.topic) == bool(args.all_topics):
        raise PlanError("--reset-offsets needs one of the scopes --topic and --all-topics")
    if args.dry_run and args.execute:
        raise PlanError("--reset-offsets takes only one of --execute and --dry-run")
    if not (args.dry_run or args.execute):
        out.note("WARN: No action will be performed as the --execute option is missing. In a future major "
                 "release, the default behavior of this command will be to prompt the user before executing "
                 "the reset rather than doing a dry run. You should add the --dry-run option explicitly if you "
                 "are scripting this command and want to keep the current default behavior without prompting.")
    rows: list[list[str]] = []
    status = 0
    for group in args.group:
        with out.progress(f"Planning the reset of group {group}..."):
            desc = await admin.describe(group)
            _check_described(group, desc)
            state = _group_state(desc)
            if state not in INACTIVE_STATES:
                status = out.error(f"Assignments can only be reset if the group '{group}' is inactive, but the "
                                   f"current state is {state}.")
                continue
            committed = await admin.committed(group)
            if args.all_topics:
                partitions = sorted(committed)
            else:
                partitions, missing = await _partitions_of(admin, args.topic)
                if missing:
                    raise AdminError("; ".join(f"topic '{t}': {error_name(c)}" for t, c in missing.items()))
            starts = await admin.log_offsets({tp: EARLIEST for tp in partitions})
            ends = await admin.log_offsets({tp: LATEST for tp in partitions})
            logs = {tp: LogRange(starts[tp], ends[tp]) for tp in partitions if tp in starts and tp in ends}
            by_time = (await admin.log_offsets({tp: spec.value for tp in partitions})
                       if spec.mode == "to-datetime" and spec.value is not None else None)
            plan = plan_reset(spec, partitions, logs, committed, by_time)
        for warning in plan.warnings:
            out.note(f"WARN: {warning}")
        if args.execute:
            with out.progress(f"Committing the new offsets of group {group}..."):
                errors = await admin.commit(group, plan.offsets)
            failed = {tp: code for tp, code in errors.items() if code != 0}
            if failed:
                status = out.error(f"Committing the new offsets of group '{group}' failed: " + ", ".join(
                    f"{t}-{p}: {error_name(c)}" for (t, p), c in sorted(failed.items())))
                continue
        rows += [[group, t, str(p), str(o)] for (t, p), o in sorted(plan.offsets.items())]
    if rows:
        out.table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows)
    return status


_DELETE_MESSAGES = {
    24: "The group id is invalid.",  # INVALID_GROUP_ID
    68: "The group is not empty.",  # NON_EMPTY_GROUP
    69: "The group id does not exist.",  # GROUP_ID_NOT_FOUND
}


async def delete_groups(admin: GroupAdmin, groups: list[str], out: Output) -> int:
    failed: dict[str, int] = {}
    done: list[str] = []
    for group in groups:
        with out.progress(f"Deleting group {group}..."):
            code = await admin.delete_group(group)
        if code:
            failed[group] = code
        else:
            done.append(group)
    names = ", ".join(f"'{g}'" for g in done)
    if not failed:
        out.line(f"Deletion of requested consumer groups ({names}) was successful.")
        return 0
    out.error("Deletion of some consumer groups failed:")
    for group, code in failed.items():
        detail = _DELETE_MESSAGES.get(code, "")
        out.line(f"* Group '{group}' could not be deleted due to: {error_name(code)}" + (f": {detail}" if detail else ""))
    if done:
        out.line(f"\nThese consumer groups were deleted successfully: {names}")
    return 1


_DELETE_OFFSETS_TOP = {
    24: "'{g}' is not valid.",
    69: "'{g}' does not exist.",
    30: "Access to '{g}' is not authorized.",
    68: "Deleting offsets of a consumer group '{g}' is forbidden if the group is not empty.",
}
_PARTITION_LEVEL = {86, 29, 3}  # GROUP_SUBSCRIBED_TO_TOPIC, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION


async def delete_offsets(admin: GroupAdmin, args: argparse.Namespace, out: Output) -> int:
    if len(args.group) != 1:
        raise PlanError("--delete-offsets takes exactly one --group")
    if not args.topic:
        raise PlanError("--delete-offsets needs --topic")
    group = args.group[0]
    with out.progress(f"Deleting offsets of group {group}..."):
        partitions, missing = await _partitions_of(admin, args.topic)
        top, results = await admin.delete_offsets(group, partitions) if partitions else (0, {})
    statuses: dict[tuple[str, int], str] = {(t, -1): f"Error: {error_name(c)}" for t, c in missing.items()}
    for tp in partitions:
        code = results.get(tp, top)
        statuses[tp] = "Successful" if code == 0 else f"Error: {error_name(code)}"
    topics = ", ".join(parse_topic_arg(a)[0] for a in args.topic)
    status = 0
    if top == 0 and not missing and all(s == "Successful" for s in statuses.values()):
        out.line(f"Request succeed for deleting offsets with topic {topics} group {group}")
    elif top in _DELETE_OFFSETS_TOP:
        status = out.error(_DELETE_OFFSETS_TOP[top].format(g=group))
    elif top in _PARTITION_LEVEL or top == 0:
        status = out.error("Encounter some partition level error, see the follow-up details:")
    else:
        status = out.error(f"Encounter some unknown error: {error_name(top)}")
    rows = [[t, str(p) if p >= 0 else "Not Provided", s] for (t, p), s in sorted(statuses.items())]
    out.table(("TOPIC", "PARTITION", "STATUS"), rows)
    return status


async def run(args: argparse.Namespace, output: Output | None = None) -> int:
    out = output or Output()
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        return out.error("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets")
    action = actions[0]
    args.group = args.group or []
    if action != "list" and not args.group:
        return out.error(f"--{action.replace('_', '-')} needs --group")
    if args.topic and action not in ("reset_offsets", "delete_offsets"):
        return out.error("--topic goes with --reset-offsets and --delete-offsets only")
    try:
        security = command_config(getattr(args, "command_config", None))
    except ToolError as e:
        return out.error(str(e))
    try:
        async with GroupAdmin(args.bootstrap_server, args.timeout / 1000, security=security) as admin:
            if action == "list":
                return await list_groups(admin, out)
            if action == "describe":
                return await describe(admin, args.group, out)
            if action == "reset_offsets":
                return await reset_offsets(admin, args, out)
            if action == "delete":
                return await delete_groups(admin, args.group, out)
            return await delete_offsets(admin, args, out)
    except (PlanError, AdminError) as e:
        return out.error(str(e))
    except (ConnectionError, TimeoutError, OSError, asyncio.IncompleteReadError) as e:
        return out.error(f"no answer from {args.bootstrap_server}: {type(e).__name__}: {e}")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("groups", help="list, describe, reset and delete consumer groups (kafka-consumer-groups)")
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...]")
    add_command_config(p)
    for name in ("list", "describe", "reset-offsets", "delete", "delete-offsets"):
        p.add_argument(f"--{name}", action="store_true")
    p.add_argument("--group", action="append", help="a group id (repeatable for --describe, --reset-offsets, "
                                                     "--delete)")
    p.add_argument("--topic", action="append", help="T or T:P[,P...] (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every partition with a committed offset")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-offset", type=int, metavar="N")
    p.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--execute", action="store_true")
    p.add_argument("--timeout", type=int, default=30000, help="ms to wait for the cluster (default 30000)")
