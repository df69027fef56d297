"""What the ZooKeeper-facing command-line tools share: error output and the ZooKeeper session."""

from __future__ import annotations

import os
import sys

from broker.zk.client import ZkClient
from broker.zk.jaas import JaasError, credentials_from_env

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
