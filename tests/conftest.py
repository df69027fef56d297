"""Shared fixtures: uvloop for every async test, a real ZooKeeper, real broker processes."""

from __future__ import annotations

import uvloop

from tests.support.brokers import *  # noqa: F403  (fixtures: broker, broker_factory)
from tests.support.cluster import cluster  # noqa: F401  (fixture: three brokers)
from tests.support.zookeeper import *  # noqa: F403  (fixtures: zk_server, zk_server_session)


def pytest_asyncio_loop_factories(config, item):  # noqa: ANN001, ANN201
    return {"uvloop": uvloop.new_event_loop}
