"""`minibroker configs`: kafka-configs.sh --zookeeper semantics.

--alter merges --add-config into the entity znode and removes --delete-config keys,
validates the result (a bad key or value exits non-zero and writes nothing), writes the
entity znode, then a v2 change notification. --describe prints the config.

Quotas per user (KIP-55) take kafka-configs' entity syntax: `--entity-type users` with
`--entity-name U` or `--entity-default`, optionally followed (or preceded) by
`--entity-type clients` with its own `--entity-name C` or `--entity-default`; each name or
default belongs to the entity type in the same position. The znode is
`/config/users/<user>[/clients/<client-id>]` (user and client id in Kafka's sanitized form),
and the messages name the entity as kafka-configs --zookeeper does (`user-principal 'alice',
default client-id`). `--describe` of users without a name lists every user (or every client
of a user) that has quota configs. SCRAM credentials in the same znodes: `--add-config
'SCRAM-SHA-512=[iterations=N,]password=P'` on a user stores the salted credential (Kafka's
preProcessScramCredentials; never the password), and `--describe` of a user shows its mechanisms
and iterations on a line of their own, never salts or keys.
"""

from __future__ import annotations

import argparse

from broker.tools.tool_support import NO_AUTH_HINT, ZK_AUTH_HELP, ToolError, connect_zk, fail
from broker.zk.client import NoAuthError, NoNodeError, ZkClient
from broker.zk.config_entities import (
    CLIENTS,
    DEFAULT_ENTITY,
    ENTITY_TYPES,
    USERS,
    InvalidConfig,
    desanitize,
    sanitize,
    split_config_list,
)
from broker.zk.config_writer import alter_entity, entity_path, read_entity
from broker.zk.scram_credentials import HASHES as SCRAM_MECHANISMS
from broker.zk.scram_credentials import ScramCredential, from_password, parse_password_spec

_fail = fail


async def run(args: argparse.Namespace) -> int:
    types: list[str] = args.entity_type
    names: list[str] = args.entity_names or []  # "" for --entity-default
    bad = [t for t in types if t not in ENTITY_TYPES]
    if bad:
        return _fail(f"--entity-type must be one of {', '.join(ENTITY_TYPES)}")
    if USERS in types or len(types) > 1:
        return await _run_quota_entity(args, types, names)
    args.entity_type = types[0]
    if len(names) != 1:
        return _fail("give exactly one of --entity-name and --entity-default")
    name = names[0] or DEFAULT_ENTITY
    args.entity_default = not names[0]
    if args.entity_type == "topics" and args.entity_default:
        return _fail("topics have no default entity")
    if args.entity_type == "brokers" and not args.entity_default:
        try:
            int(name)
        except ValueError:
            return _fail(f"broker entity name must be a broker id, not {name!r}")
    shown_name = name
    if args.entity_type == CLIENTS and not args.entity_default:
        name = sanitize(name)  # Kafka's znode form of a client id (users: _run_quota_entity)
    try:
        zk = await connect_zk(args.zookeeper)
    except ToolError as e:
        return _fail(str(e))
    try:
        current, _ = await read_entity(zk, args.entity_type, name)
        if args.describe:
            shown = ",".join(f"{k}={v}" for k, v in sorted(current.items()))
            print(f"Configs for {args.entity_type[:-1]} '{shown_name}' are {shown}")
            return 0
        try:
            adds = split_config_list(args.add_config or "")
        except InvalidConfig as e:
            return _fail(str(e))
        deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        missing = [k for k in deletes if k not in current and k not in adds]
        if missing:
            return _fail(f"Invalid config(s): {','.join(missing)} (not set on {args.entity_type} '{name}')")
        try:
            await alter_entity(zk, args.entity_type, name, adds, deletes, force=True)
        except InvalidConfig as e:
            return _fail(str(e))
        print(f"Completed updating config for {args.entity_type[:-1]} {shown_name}.")
        return 0
    except NoAuthError as e:
        return _fail(f"{e}: {NO_AUTH_HINT}")
    finally:
        await zk.close()


def _scram_credentials(adds: dict[str, str], default_entity: bool) -> None:
    """ConfigCommand.preProcessScramCredentials: `SCRAM-SHA-512=[iterations=N,]password=P` becomes
    the stored credential (new salt; the password itself is never written)."""
    for mechanism in SCRAM_MECHANISMS:
        if mechanism in adds:
            if default_entity:
                raise ValueError("SCRAM credentials cannot be set for the default user entity")
            iterations, password = parse_password_spec(mechanism, adds[mechanism])
            adds[mechanism] = from_password(mechanism, password, iterations).to_config()


def _describe_scram(user: str, config: dict[str, str]) -> None:
    """Kafka's `--describe` of SCRAM credentials: mechanism and iterations, never salt or keys."""
    infos = []
    for mechanism in SCRAM_MECHANISMS:
        if mechanism in config:
            try:
                infos.append(f"{mechanism}=iterations={ScramCredential.from_config(config[mechanism]).iterations}")
            except ValueError:
                infos.append(f"{mechanism}=(unreadable)")
    if infos:
        print(f"SCRAM credential configs for user-principal '{user}' are {', '.join(infos)}")


# ---- users and users+clients (KIP-55), kafka-configs' combined entity --------------------------

def _quota_entity(types: list[str], names: list[str]) -> list[tuple[str, str | None]]:
    """(type, znode name or None) pairs, users first; a name or default goes with the type in
    its position (ConfigCommand.parseClientQuotaEntity). Raises ValueError."""
    if len(types) != len(set(types)):
        raise ValueError(f"Duplicate entity type(s) specified: {','.join(types)}")
    if len(types) > 1 and set(types) != {USERS, CLIENTS}:
        raise ValueError(f"Only '{USERS}' and '{CLIENTS}' entity types may be specified together")
    if len(names) > len(types):
        raise ValueError("more --entity-name/--entity-default than --entity-type")
    if any(n in (".", "..") for n in names):
        raise ValueError("an entity name cannot be . or .. (ZooKeeper refuses them as znode names)")
    # "" is --entity-default; a type beyond the names given has None: all entities (--describe).
    pairs = [(t, None if i >= len(names) else sanitize(names[i]) if names[i] else DEFAULT_ENTITY)
             for i, t in enumerate(types)]
    return sorted(pairs, key=lambda p: p[0] != USERS)


def _shown(pairs: list[tuple[str, str]]) -> str:
    """kafka-configs --zookeeper's entity text: `user-principal 'a', default client-id`."""
    parts = []
    for etype, znode in pairs:
        label = "user-principal" if etype == USERS else "client-id"
        parts.append(f"default {label}" if znode == DEFAULT_ENTITY else f"{label} '{desanitize(znode)}'")
    return ", ".join(parts)


def _path(pairs: list[tuple[str, str]]) -> tuple[str, str]:
    """(root entity type, znode name under it): ("users", "alice/clients/c1")."""
    (root, name), *child = pairs
    return root, name + "".join(f"/{t}/{n}" for t, n in child)


async def _children(zk: ZkClient, path: str) -> list[str]:
    try:
        return sorted(await zk.get_children(path))
    except NoNodeError:
        return []


async def _all_entities(zk: ZkClient, pairs: list[tuple[str, str | None]]) -> list[list[tuple[str, str]]]:
    """The entities a --describe names (ConfigEntity.getAllEntities): missing names mean all."""
    (root, name), *child = pairs
    roots = [name] if name is not None else await _children(zk, entity_path(root, "").rstrip("/"))
    out: list[list[tuple[str, str]]] = []
    for r in roots:
        if not child:
            out.append([(root, r)])
            continue
        ctype, cname = child[0]
        cnames = [cname] if cname is not None else await _children(zk, f"{entity_path(root, r)}/{ctype}")
        out += [[(root, r), (ctype, c)] for c in cnames]
    return out


def _quota_config_text(config: dict[str, str]) -> str:
    # SCRAM credentials share the user znodes; they are never printed by the quota side.
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()) if not k.startswith("SCRAM-"))


def _refusal(e: InvalidConfig) -> str:
    # A SCRAM credential (a password, on the way in) is never repeated in a message.
    return f"Invalid configuration {e.key}: {e.why}" if e.key.startswith("SCRAM-") else str(e)


async def _run_quota_entity(args: argparse.Namespace, types: list[str], names: list[str]) -> int:
    try:
        pairs = _quota_entity(types, names)
    except ValueError as e:
        return _fail(str(e))
    if args.alter and len(names) != len(types):
        return _fail("--entity-name or --entity-default must be specified with each --entity-type for --alter")
    try:
        zk = await connect_zk(args.zookeeper)
    except ToolError as e:
        return _fail(str(e))
    try:
        if args.describe:
            describe_all = pairs[0][1] is None and len(pairs) == 1
            for entity in await _all_entities(zk, pairs):
                config, _ = await read_entity(zk, *_path(entity))
                text = _quota_config_text(config)
                if text or not describe_all:  # as Kafka: users with only <user, client> quotas are skipped
                    print(f"Configs for {_shown(entity)} are {text}")
                if len(entity) == 1 and entity[0][1] != DEFAULT_ENTITY:
                    _describe_scram(desanitize(entity[0][1]), config)
            return 0
        named = [(t, n) for t, n in pairs if n is not None]
        etype, znode = _path(named)
        try:
            adds = split_config_list(args.add_config or "")
            if len(named) > 1 and any(m in adds for m in SCRAM_MECHANISMS):
                raise ValueError("SCRAM credentials belong to a user, not to a user and client id")
            _scram_credentials(adds, named[0][1] == DEFAULT_ENTITY)
        except InvalidConfig as e:
            return _fail(_refusal(e))
        except ValueError as e:
            return _fail(str(e))
        deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        current, _ = await read_entity(zk, etype, znode)
        missing = [k for k in deletes if k not in current and k not in adds]
        if missing:
            return _fail(f"Invalid config(s): {','.join(missing)} (not set on {_shown(named)})")
        try:
            await alter_entity(zk, etype, znode, adds, deletes, force=True)
        except InvalidConfig as e:
            return _fail(_refusal(e))
        print(f"Completed updating config for entity: {_shown(named)}.")
        return 0
    except NoAuthError as e:
        return _fail(f"{e}: {NO_AUTH_HINT}")
    finally:
        await zk.close()


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("configs", help="alter or describe dynamic configs in ZooKeeper", epilog=ZK_AUTH_HELP)
    p.add_argument("--zookeeper", required=True, help="host:port[/chroot]")
    # Repeatable, in kafka-configs' order: `--entity-type users --entity-name U --entity-type
    # clients --entity-default`; names and defaults land in one list, in command-line order.
    p.add_argument("--entity-type", required=True, action="append")
    p.add_argument("--entity-name", dest="entity_names", action="append")
    p.add_argument("--entity-default", dest="entity_names", action="append_const", const="")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true")
    action.add_argument("--describe", action="store_true")
    p.add_argument("--add-config")
    p.add_argument("--delete-config")
