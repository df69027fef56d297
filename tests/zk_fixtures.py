"""Real ZooKeeper servers for tests: Debian's zookeeper started as a plain background process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.zk_server import ZooKeeperServer


@pytest.fixture
def zk_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zookeeper")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def zk_server_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()
