"""What the ZooKeeper-facing command-line tools share: error output and the ZooKeeper session."""

from __future__ import annotations

import sys

from broker.zk.client import ZkClient


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
