"""One broker per client-test module, on the session's ZooKeeper (its own chroot, so topic names never collide)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.zk.server import ZooKeeperServer
from tests.support.brokers import BrokerProcess, chrooted_broker


@pytest.fixture(scope="module")
def client_broker(tmp_path_factory: pytest.TempPathFactory,
                  zk_server_session: ZooKeeperServer) -> Iterator[BrokerProcess]:
    with chrooted_broker(tmp_path_factory.mktemp("clients"), zk_server_session.connect_string,
                         {"auto.create.topics.enable": "false"}) as b:
        yield b
