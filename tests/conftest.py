"""Shared fixtures: uvloop for every async test, a real ZooKeeper, real broker processes, a three-broker cluster.

The helpers behind them live in `tests.support`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import uvloop

from broker.zk.server import ZooKeeperServer
from tests.support.brokers import BrokerProcess
from tests.support.cluster import Cluster


def pytest_asyncio_loop_factories(config, item):  # noqa: ANN001, ANN201
    return {"uvloop": uvloop.new_event_loop}


class _SpareZooKeepers:
    """Each test's own fresh ZooKeeper, the next one spawned while this test runs: a JVM takes
    ~0.5 s to serve (more under load), some 190 tests ask for one, and the spare waits idle."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        self.spare: ZooKeeperServer | None = None

    def _spawn(self) -> ZooKeeperServer:
        self.count += 1
        server = ZooKeeperServer(self.root / f"zookeeper-{self.count}")
        server.start(wait=False)  # waited for in take()
        return server

    def take(self) -> ZooKeeperServer:
        server, self.spare = self.spare or self._spawn(), None
        try:
            server.wait_up(20)
        except BaseException:
            server.kill()
            raise
        self.spare = self._spawn()
        return server

    def close(self) -> None:
        if self.spare is not None:
            self.spare.kill()


@pytest.fixture(scope="session")
def _zk_spares(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_SpareZooKeepers]:
    spares = _SpareZooKeepers(tmp_path_factory.mktemp("zookeepers"))
    yield spares
    spares.close()


@pytest.fixture
def zk_server(_zk_spares: _SpareZooKeepers) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test's own, fresh (its data under the session's `zookeepers` directory)."""
    server = _zk_spares.take()
    yield server
    # SIGKILL, as the test's brokers get: its data goes with tmp_path, so a clean shutdown (SIGTERM,
    # some 0.4 s of the JVM's shutdown per test) keeps nothing anyone reads.
    server.kill()


@pytest.fixture(scope="session")
def zk_server_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def broker_factory(tmp_path: Path, zk_server: ZooKeeperServer) -> Iterator[Callable[..., BrokerProcess]]:
    """make(broker_id, start=True, metrics=False, nofile=None, log_level="info", **overrides): a broker
    on `zk_server`, killed at the end; `nofile` lowers its soft RLIMIT_NOFILE.

    Overrides are broker properties with `_` for `.` (num_partitions="1").
    """
    started: list[BrokerProcess] = []

    def make(broker_id: int = 0, start: bool = True, metrics: bool = False, nofile: int | None = None,
             log_level: str = "info", **overrides: str) -> BrokerProcess:
        props = {k.replace("_", "."): v for k, v in overrides.items()}
        b = BrokerProcess(tmp_path, broker_id, zk_server.connect_string, props, metrics=metrics, nofile=nofile,
                          log_level=log_level)
        started.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(0)


@pytest.fixture
async def cluster(tmp_path: Path, zk_server: ZooKeeperServer) -> AsyncIterator[Cluster]:
    """Three brokers (FAST timings, metrics on) on `zk_server`, all registered."""
    c = await Cluster.start(tmp_path, zk_server.connect_string)
    try:
        yield c
    finally:
        await c.close()
