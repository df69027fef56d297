"""What the ZooKeeper-facing command-line tools share: error output and the ZooKeeper session."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from broker.config import read_properties
from broker.zk.client import ZkClient
from broker.zk.jaas import JaasError, credentials_from_env
from fetcher.security import PLAINTEXT, ClientSecurity, SecurityConfigError

# The --help epilog of every tool that writes ZooKeeper (configs, reassign).
ZK_AUTH_HELP = (
    "ZooKeeper ACLs: when the brokers run with zookeeper.set.acl=true, give this tool their ZooKeeper "
    "credentials the way Kafka's tools take them: KAFKA_OPTS='-Djava.security.auth.login.config=FILE' naming a "
    "JAAS file whose Client section (another with -Dzookeeper.sasl.clientconfig=NAME) has username=\"...\" "
    "password=\"...\". They are sent with ZooKeeper's digest scheme, and znodes the tool creates get Kafka's "
    "secure ACLs (world-readable, writable only by that identity; /config/users and /config/brokers not "
    "readable by others)."
)
NO_AUTH_HINT = ("ZooKeeper refused it for this client's identity; with zookeeper.set.acl=true give the brokers' "
                "ZooKeeper credentials in KAFKA_OPTS=-Djava.security.auth.login.config=FILE (see --help)")


class ToolError(Exception):
    """A refusal the tool prints as `Error: ...` and exits 1 for."""


def fail(msg: str) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return 1


async def connect_zk(connect: str) -> ZkClient:
    try:
        credentials = credentials_from_env(os.environ)
    except JaasError as e:
        raise ToolError(str(e)) from e
    # Kafka's tools create secure znodes whenever they authenticate (JaasUtils.isZkSaslEnabled).
    zk = ZkClient(connect, 10000, credentials=credentials, secure_acls=credentials is not None)
    try:
        await zk.start(timeout=15)
    except Exception as e:
        raise ToolError(f"cannot connect to ZooKeeper at {connect}: {e}") from e
    return zk


def add_command_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties for the connection to the brokers (Kafka's names: "
                             "security.protocol, ssl.truststore.location, ssl.keystore.location, "
                             "ssl.key.password, ssl.keystore.type/ssl.truststore.type PEM or PKCS12 with "
                             "ssl.keystore.password/ssl.truststore.password, "
                             "ssl.endpoint.identification.algorithm, sasl.mechanism, "
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
