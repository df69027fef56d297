"""`minibroker acls`: kafka-acls over the admin protocol (CreateAcls, DescribeAcls, DeleteAcls v2).

Kafka 2.8 AclCommand's flags and output: `--add|--remove|--list`; `--allow-principal`,
`--deny-principal`, `--allow-host`, `--deny-host` (default `*` for a principal given without a
host), `--operation` (default All, repeatable); `--topic`, `--group`, `--transactional-id`
(repeatable) and `--cluster`; `--resource-pattern-type` (literal, prefixed; for --list and
--remove also any and match; default literal); `--force` skips --remove's question;
`--principal` narrows --list. An operation a resource type does not support is refused as
kafka-acls does. The lines printed are AclCommand's: `Adding ACLs for resource
`ResourcePattern(...)`:` and `Current ACLs for resource `ResourcePattern(...)`:` followed by one
`(principal=..., host=..., operation=..., permissionType=...)` per ACL.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from broker.security.acl import (
    CLUSTER_NAME,
    SUPPORTED,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    parse_name,
    parse_principal,
    pascal,
)
from broker.tools.group_admin import AdminError, GroupAdmin
from broker.tools.tool_support import ToolError, add_command_config, command_config
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

VERSION = 2
Pattern = tuple[ResourceType, str, PatternType]
Entry = tuple[str, str, AclOperation, PermissionType]


def pattern_text(p: Pattern) -> str:
    return f"ResourcePattern(resourceType={p[0].name}, name={p[1]}, patternType={p[2].name})"


def entry_text(e: Entry) -> str:
    return f"(principal={e[0]}, host={e[1]}, operation={e[2].name}, permissionType={e[3].name})"


def block(head: str, p: Pattern, entries: Iterable[Entry]) -> str:
    """AclCommand's `<head> `<pattern>`: \\n \\t<acl>\\n\\t<acl> \\n`."""
    return f"{head} `{pattern_text(p)}`: \n " + "\n".join("\t" + entry_text(e) for e in entries) + " \n"


class UsageError(Exception):
    pass


def resources(args: argparse.Namespace, pattern_type: PatternType) -> list[Pattern]:
    out: list[Pattern] = [(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic or []]
    if args.cluster and pattern_type == PatternType.LITERAL:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, pattern_type))
    out += [(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group or []]
    out += [(ResourceType.TRANSACTIONAL_ID, t, pattern_type) for t in args.transactional_id or []]
    return out


def entries(args: argparse.Namespace) -> list[Entry]:
    """AclCommand.getAcl: principals x operations x hosts, allow and deny."""
    ops = [AclOperation(parse_name(AclOperation, o)) for o in (args.operation or ["All"])]
    out: list[Entry] = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, PermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, PermissionType.DENY)):
        if not principals:
            continue
        for principal in principals:
            parse_principal(principal.strip())
        for principal in dict.fromkeys(p.strip() for p in principals):
            for op in dict.fromkeys(ops):
                for host in dict.fromkeys(h.strip() for h in (hosts or ["*"])):
                    out.append((principal, host, op, permission))
    return out


def validate_operations(patterns: list[Pattern], acls: list[Entry]) -> None:
    for rtype, _, _ in patterns:
        valid = SUPPORTED[rtype] | {AclOperation.ALL}
        if any(e[2] not in valid for e in acls):
            names = ",".join(sorted(op.name for op in valid))
            raise UsageError(f"ResourceType {rtype.name} only supports operations {names}")


def _check(code: int, message: str | None, what: str) -> None:
    if code:
        raise AdminError(f"{what}: {ErrorCode.name_of(code)}{': ' + message if message else ''}")


async def describe(admin: GroupAdmin, flt: dict[str, Any]) -> dict[Pattern, list[Entry]]:
    resp = await admin._request(await admin._any(), ApiKey.DESCRIBE_ACLS, VERSION, flt)
    _check(resp["error_code"], resp["error_message"], "Error while listing ACLs")
    out: dict[Pattern, list[Entry]] = {}
    for r in resp["resources"]:
        p = (ResourceType(r["resource_type"]), r["resource_name"], PatternType(r["pattern_type"]))
        out.setdefault(p, []).extend((a["principal"], a["host"], AclOperation(a["operation"]),
                                      PermissionType(a["permission_type"])) for a in r["acls"])
    return out


def _filter(p: tuple[ResourceType, str | None, PatternType], e: Entry | None = None) -> dict[str, Any]:
    return {"resource_type_filter": p[0], "resource_name_filter": p[1], "pattern_type_filter": p[2],
            "principal_filter": e[0] if e else None, "host_filter": e[1] if e else None,
            "operation": e[2] if e else AclOperation.ANY, "permission_type": e[3] if e else PermissionType.ANY}


async def list_acls(admin: GroupAdmin, patterns: list[Pattern], principals: list[str]) -> list[str]:
    found: dict[Pattern, list[Entry]] = {}
    filters = [_filter(p) for p in patterns] or [_filter((ResourceType.ANY, None, PatternType.ANY))]
    for f in filters:
        for p, acls in (await describe(admin, f)).items():
            found.setdefault(p, []).extend(a for a in acls if a not in found.get(p, []))
    lines = []
    if not principals:
        return [block("Current ACLs for resource", p, acls) for p, acls in found.items()]
    for principal in principals:
        lines.append(f"ACLs for principal `{principal}`")
        lines += [block("Current ACLs for resource", p, [a for a in acls if a[0] == principal])
                  for p, acls in found.items() if any(a[0] == principal for a in acls)]
    return lines


async def run_with(admin: GroupAdmin, args: argparse.Namespace) -> int:
    pattern_type = PatternType(parse_name(PatternType, args.resource_pattern_type)) if args.resource_pattern_type \
        else PatternType.LITERAL
    patterns = resources(args, pattern_type)
    acls = entries(args)
    principals = [p.strip() for p in args.principal or []]
    if args.add:
        if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise UsageError(f"A '--resource-pattern-type' value of '{pattern_type.name}' is not valid when "
                             "adding acls.")
        if not patterns:
            raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group>")
        if not acls:
            raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
        validate_operations(patterns, acls)
        for p in patterns:
            print(block("Adding ACLs for resource", p, acls))
            creations = [{"resource_type": p[0], "resource_name": p[1], "resource_pattern_type": p[2],
                          "principal": e[0], "host": e[1], "operation": e[2], "permission_type": e[3]} for e in acls]
            resp = await admin._request(await admin._any(), ApiKey.CREATE_ACLS, VERSION, {"creations": creations})
            for r in resp["results"]:
                _check(r["error_code"], r["error_message"], "Error while adding ACLs")
    elif args.remove:
        if not patterns:
            raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group>")
        validate_operations(patterns, acls)
        for p in patterns:
            if not args.force:
                what = (f"remove ACLs: \n {chr(10).join(chr(9) + entry_text(e) for e in acls)} \n from"
                        if acls else "delete all ACLs for")
                print(f"Are you sure you want to {what} resource filter `{pattern_text(p)}`? (y/n)")
                if sys.stdin.readline().strip().lower() != "y":
                    continue
            filters = [_filter(p, e) for e in acls] or [_filter(p)]
            resp = await admin._request(await admin._any(), ApiKey.DELETE_ACLS, VERSION, {"filters": filters})
            for r in resp["filter_results"]:
                _check(r["error_code"], r["error_message"], "Error while removing ACLs")
                for m in r["matching_acls"]:
                    _check(m["error_code"], m["error_message"], "Error while removing ACLs")
    for line in await list_acls(admin, patterns if (args.add or args.remove or patterns) else [], principals):
        print(line)
    return 0


async def run(args: argparse.Namespace) -> int:
    if sum(bool(x) for x in (args.add, args.remove, args.list)) != 1:
        print("Command must include exactly one action: --list, --add, --remove.", file=sys.stderr)
        return 1
    try:
        security = command_config(getattr(args, "command_config", None))
    except ToolError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    try:
        async with GroupAdmin(args.bootstrap_server, args.timeout / 1000, "minibroker-acls", security) as admin:
            return await run_with(admin, args)
    except (UsageError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except AdminError as e:
        print(str(e), file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls)")
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...]")
    add_command_config(p)
    p.add_argument("--add", action="store_true", help="add ACLs")
    p.add_argument("--remove", action="store_true", help="remove ACLs")
    p.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--allow-principal", action="append", help="Type:name (User:alice, User:*); repeatable")
    p.add_argument("--deny-principal", action="append", help="Type:name; repeatable")
    p.add_argument("--allow-host", action="append", help="an IP or *; default * for an allowed principal")
    p.add_argument("--deny-host", action="append", help="an IP or *; default * for a denied principal")
    p.add_argument("--principal", action="append", help="with --list: only this principal's ACLs")
    p.add_argument("--operation", action="append",
                   help="default All; one of " + ", ".join(pascal(o.name) for o in AclOperation if o > 1))
    p.add_argument("--topic", action="append", help="topic name (or prefix, or *); repeatable")
    p.add_argument("--group", action="append", help="consumer group (or prefix, or *); repeatable")
    p.add_argument("--transactional-id", action="append", help="transactional id; repeatable")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default=None,
                   help="literal (default), prefixed; for --list/--remove also any, match")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    p.add_argument("--timeout", type=int, default=30000, help="ms to wait for each answer")
