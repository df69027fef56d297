"""Shared fixtures: uvloop for every async test, a real ZooKeeper, real broker processes."""

from __future__ import annotations

import uvloop

from tests.brokers import *  # noqa: F403  (fixtures: broker, broker_factory)
from tests.cluster import cluster  # noqa: F401  (fixture: three brokers)
from tests.zk_fixtures import *  # noqa: F403  (fixtures: zk_server, zk_server_session)


def pytest_asyncio_loop_factories(config, item):  # noqa: ANN001, ANN201
    return {"uvloop": uvloop.new_event_loop}
