"""A broker health probe for containers: `python -m broker.tools.probe [HOST:PORT] [--command-config FILE]`.

Sends ApiVersions and exits 0 if the broker answers without error, 1 otherwise, printing why
(and the broker's own account from its health file, broker/health.py, such as "waiting for
ZooKeeper at zookeeper:2181 for 40 s"). Not a `minibroker` subcommand: design.md's command
list has none, and the image's health check calls the module.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from broker.health import HEALTH_FILE_ENV, read_health
from broker.tools.tool_support import ToolError, add_command_config, command_config
from fetcher.connection import KafkaConnection
from fetcher.security import ClientSecurity
from protocol.api_keys import ApiKey


async def probe(host: str, port: int, timeout: float, security: ClientSecurity | None = None) -> str | None:
    """None if the broker answered ApiVersions without error, else what went wrong."""
    try:
        async with await KafkaConnection.open(host, port, "minibroker-probe", timeout, security=security) as conn:
            resp = await conn.request(ApiKey.API_VERSIONS, 0, {}, timeout)
    except (OSError, TimeoutError, ConnectionError) as e:
        return f"no answer from {host}:{port}: {type(e).__name__} {e}".strip()
    if resp["error_code"] != 0:
        return f"ApiVersions error {resp['error_code']}"
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.tools.probe")
    parser.add_argument("target", nargs="?", default="127.0.0.1:9092", metavar="HOST:PORT")
    add_command_config(parser)
    args = parser.parse_args(argv)
    target = args.target
    try:
        security = command_config(args.command_config)
    except ToolError as e:
        print(f"unhealthy: {e}")
        return 1
    host, _, port = target.rpartition(":")
    problem = asyncio.run(probe(host or "127.0.0.1", int(port), 5.0, security))
    state = read_health(os.environ.get(HEALTH_FILE_ENV))
    if problem is None:
        print(f"ok: {target} answers ApiVersions" + (f"; {state}" if state else ""))
        return 0
    print(f"unhealthy: {problem}" + (f"; broker: {state}" if state else ""))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
