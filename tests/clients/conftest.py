"""One broker per client-test module, on the session's ZooKeeper (its own chroot, so topic names never collide)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.zk.server import ZooKeeperServer
from tests.support.brokers import BrokerProcess, chrooted_broker


@pytest.fixture(scope="module")
def client_broker(tmp_path_factory: pytest.TempPathFactory,
                  zk_server_session: ZooKeeperServer) -> Iterator[BrokerProcess]:
    with chrooted_broker(tmp_path_factory.mktemp("clients"), zk_server_session.connect_string,
                         {"auto.create.topics.enable": "false"}) as b:
        yield b


NODE_DIR = Path(__file__).parent / "node"


@pytest.fixture(scope="session")
def kafkajs_dir() -> Path:
    """tests/clients/node with KafkaJS installed (installed here when the test command has not)."""
    if not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
        npm = shutil.which("npm")
        assert npm, "npm is needed for the KafkaJS tests (scripts/run test installs it)"
        subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=300)
    return NODE_DIR
