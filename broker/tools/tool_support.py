"""What the ZooKeeper-facing command-line tools share: error output and the ZooKeeper session."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from broker.config import read_properties
from broker.zk.client import ZkClient
from fetcher.security import PLAINTEXT, ClientSecurity, SecurityConfigError


class ToolError(Exception):
    """A refusal the tool prints as `Error: ...` and exits 1 for."""


def fail(msg: str) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return 1


async def connect_zk(connect: str) -> ZkClient:
    zk = ZkClient(connect, 10000)
    try:
        await zk.start(timeout=15)
    except Exception as e:
        raise ToolError(f"cannot connect to ZooKeeper at {connect}: {e}") from e
    return zk


def add_command_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties for the connection to the brokers (Kafka's names: "
                             "security.protocol, ssl.truststore.location, ssl.keystore.location, "
                             "ssl.key.password, ssl.endpoint.identification.algorithm, sasl.mechanism, "
                             "sasl.jaas.config or sasl.username/sasl.password)")


def command_config(path: str | None) -> ClientSecurity:
    """The ClientSecurity of a `--command-config` file (PLAINTEXT without one); ToolError naming the
    file and the key, never a value."""
    if not path:
        return PLAINTEXT
    try:
        props = read_properties(Path(path))
    except OSError as e:
        raise ToolError(f"--command-config {path}: {e.strerror or e}") from None
    try:
        security = ClientSecurity.from_properties(props)
        security.ssl_context()  # its PEM files are read now: a bad one is named before any connection
    except SecurityConfigError as e:
        raise ToolError(f"--command-config {path}: {e}") from None
    return security
