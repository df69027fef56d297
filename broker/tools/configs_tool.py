"""`minibroker configs`: kafka-configs.sh --zookeeper semantics.

--alter merges --add-config into the entity znode and removes --delete-config keys,
validates the result (a bad key or value exits non-zero and writes nothing), writes the
entity znode, then a v2 change notification. --describe prints the config.
"""

from __future__ import annotations

import argparse

from broker.tools.tool_support import NO_AUTH_HINT, ZK_AUTH_HELP, ToolError, connect_zk, fail
from broker.zk.client import NoAuthError
from broker.zk.config_entities import (
    CLIENTS,
    DEFAULT_ENTITY,
    ENTITY_TYPES,
    USERS,
    InvalidConfig,
    sanitize,
    split_config_list,
)
from broker.zk.config_writer import alter_entity, read_entity
from broker.zk.scram_credentials import HASHES as SCRAM_MECHANISMS
from broker.zk.scram_credentials import ScramCredential, from_password, parse_password_spec

_fail = fail


async def run(args: argparse.Namespace) -> int:
    if args.entity_type not in ENTITY_TYPES:
        return _fail(f"--entity-type must be one of {', '.join(ENTITY_TYPES)}")
    if bool(args.entity_name) == bool(args.entity_default):
        return _fail("give exactly one of --entity-name and --entity-default")
    name = DEFAULT_ENTITY if args.entity_default else args.entity_name
    if args.entity_type == "topics" and args.entity_default:
        return _fail("topics have no default entity")
    if args.entity_type == "brokers" and not args.entity_default:
        try:
            int(name)
        except ValueError:
            return _fail(f"broker entity name must be a broker id, not {name!r}")
    shown_name = name
    if args.entity_type in (CLIENTS, USERS) and not args.entity_default:
        name = sanitize(name)  # Kafka's znode form of a client id or user principal
    try:
        zk = await connect_zk(args.zookeeper)
    except ToolError as e:
        return _fail(str(e))
    try:
        current, _ = await read_entity(zk, args.entity_type, name)
        if args.describe:
            shown = ",".join(f"{k}={v}" for k, v in sorted(current.items()) if k not in SCRAM_MECHANISMS)
            print(f"Configs for {args.entity_type[:-1]} '{shown_name}' are {shown}")
            if args.entity_type == USERS:
                _describe_scram(shown_name, current)
            return 0
        try:
            adds = split_config_list(args.add_config or "")
            if args.entity_type == USERS:
                _scram_credentials(adds, bool(args.entity_default))
        except (InvalidConfig, ValueError) as e:
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


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("configs", help="alter or describe dynamic configs in ZooKeeper", epilog=ZK_AUTH_HELP)
    p.add_argument("--zookeeper", required=True, help="host:port[/chroot]")
    p.add_argument("--entity-type", required=True)
    p.add_argument("--entity-name")
    p.add_argument("--entity-default", action="store_true")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true")
    action.add_argument("--describe", action="store_true")
    p.add_argument("--add-config")
    p.add_argument("--delete-config")
