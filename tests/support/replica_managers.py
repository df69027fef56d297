"""A ReplicaManager for unit tests of the log and replication modules: real logs in a temporary
directory, no ZooKeeper behind it (the client points at a closed port and is never started), a
clock that stands still; and the records those tests append."""

from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from broker.metrics import Registry
from broker.replication.replica_manager import ReplicaManager
from broker.zk.client import ZkClient
from protocol.records.message_set import build_message_set


def records(n: int) -> bytes:
    """n small keyless records, values v0..v(n-1)."""
    return build_message_set([(None, b"v%d" % i, 0) for i in range(n)])


def standalone_replica_manager(log_dir: Path) -> ReplicaManager:
    config = BrokerConfig(broker_id=1, log_dirs=[log_dir], replica_lag_time_max_ms=10_000)
    return ReplicaManager(config, ZkClient("127.0.0.1:1"), Registry(), clock=lambda: 0.0)
