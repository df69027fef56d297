"""The `minibroker` command: serve, cluster, topics, configs, reassign, groups, acls (design.md's external interface)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import NoReturn

from broker.config import ConfigError, load_config
from broker.logs import configure
from broker.tools.tool_support import add_command_config


def exit_now(code: int) -> NoReturn:
    """The process ends here, with `code`, once its output is flushed (no interpreter teardown)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _serve(args: argparse.Namespace) -> int:
    from broker import logs
    try:
        config = load_config(Path(args.config), args.override or [], os.environ)
    except (ConfigError, OSError) as e:
        print(f"minibroker: {e}", file=sys.stderr)
        return 2
    log = logs.configure(config.broker_id, args.log_format, args.log_level)
    for key in config.unknown_keys:
        log.warning("config.unknown_key", key=key)
    from broker.allocator import keep_freed_buffers
    from broker.server import Broker, StartupError

    # Freed request frames stay in the heap for the next ones (broker.allocator: page faults).
    keep_freed_buffers()

    async def run() -> int:
        try:
            broker = Broker(config)  # reads the TLS listeners' PEM files
        except ConfigError as e:
            print(f"minibroker: {e}", file=sys.stderr)
            log.error("broker.config_refused", key=e.key, reason=e.why)
            return 2
        try:
            stopped = await broker.run_until_signal()
        except StartupError as e:
            log.error("broker.startup_refused", reason=str(e))
            await broker.zk.close()
            return 1
        # Broker.stop has made every log durable, written the clean-shutdown marker and closed the
        # ZooKeeper session: nothing is left to do but exit. The interpreter's teardown (cancelling
        # the tasks left, joining worker threads, freeing every partition's objects) took 0.5-0.75 s
        # more at 10,000 partitions, and would wait on any thread still in a system call. A
        # shutdown whose logs did not all close (`broker.stop_failed`, exit_code 1) exits 1: the
        # logs were not made durable, and the next start recovers them.
        exit_now(0 if stopped else 1)
        return 0

    try:
        import uvloop
        return uvloop.run(run())
    except ImportError:
        return asyncio.run(run())


def _cluster(args: argparse.Namespace) -> int:
    from broker.tools import local_cluster
    d = Path(args.dir)
    if args.action == "up":
        return local_cluster.up(d, args.brokers, args.zookeeper, args.base_port)
    if args.action == "status":
        return local_cluster.status(d)
    return local_cluster.down(d)


def _topics(args: argparse.Namespace) -> int:
    from broker.tools import topics_tool
    return asyncio.run(topics_tool.run(args))


def _configs(args: argparse.Namespace) -> int:
    from broker.tools import configs_tool
    configure(None, level="warning")  # stdout is the tool's report; events go to stderr
    return asyncio.run(configs_tool.run(args))


def _reassign(args: argparse.Namespace) -> int:
    from broker.tools import reassign_tool
    configure(None, level="warning")  # stdout is the report (JSON a script may parse)
    return asyncio.run(reassign_tool.run(args))


def _groups(args: argparse.Namespace) -> int:
    from broker.tools import groups_tool
    configure(None, level="warning")  # stdout is the tool's tables; events go to stderr
    return asyncio.run(groups_tool.run(args))


def _acls(args: argparse.Namespace) -> int:
    from broker.tools import acls_tool
    configure(None, level="warning")  # stdout is kafka-acls' listing; events go to stderr
    return asyncio.run(acls_tool.run(args))


def _zk_security_migration(args: argparse.Namespace) -> int:
    from broker.tools import zk_security_migration
    configure(None, level="warning")
    return asyncio.run(zk_security_migration.run(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker", description="A Kafka-compatible broker.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run one broker in the foreground")
    serve.add_argument("config", help="server.properties")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a property")
    serve.add_argument("--log-format", choices=["console", "json"], default="console")
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(func=_serve)

    cluster = sub.add_parser("cluster", help="a local ZooKeeper plus N brokers in the background")
    cluster.add_argument("action", choices=["up", "status", "down"])
    cluster.add_argument("--brokers", type=int, default=3)
    cluster.add_argument("--dir", default=".minibroker")
    cluster.add_argument("--zookeeper", default=None, help="use this ZooKeeper instead of starting one")
    cluster.add_argument("--base-port", type=int, default=9092)
    cluster.set_defaults(func=_cluster)

    topics = sub.add_parser("topics", help="create, alter, delete, describe and list topics")
    topics.add_argument("--bootstrap-server", required=True)
    add_command_config(topics)
    action = topics.add_mutually_exclusive_group(required=True)
    for name in ("create", "alter", "delete", "describe", "list"):
        action.add_argument(f"--{name}", action="store_true")
    topics.add_argument("--topic")
    topics.add_argument("--partitions", type=int)
    topics.add_argument("--replication-factor", type=int)
    topics.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    topics.add_argument("--timeout", type=float, default=30.0)
    topics.add_argument("--retry-on-quota-violation", action="store_true",
                        help="on THROTTLING_QUOTA_EXCEEDED, wait out the throttle and retry until --timeout")
    topics.set_defaults(func=_topics)

    from broker.tools import configs_tool
    configs_tool.add_parser(sub)
    sub.choices["configs"].set_defaults(func=_configs)
    from broker.tools import reassign_tool
    reassign_tool.add_parser(sub)
    sub.choices["reassign"].set_defaults(func=_reassign)
    from broker.tools import groups_tool
    groups_tool.add_parser(sub)
    sub.choices["groups"].set_defaults(func=_groups)
    from broker.tools import acls_tool
    acls_tool.add_parser(sub)
    sub.choices["acls"].set_defaults(func=_acls)
    from broker.tools import zk_security_migration
    zk_security_migration.add_parser(sub)
    sub.choices["zookeeper-security-migration"].set_defaults(func=_zk_security_migration)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))
