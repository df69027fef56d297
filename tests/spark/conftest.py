"""Real Spark (local mode) against one real broker on the session's real ZooKeeper.

Starting Spark takes 10-20 s, so one SparkSession serves every test here; the broker is
started once per module as in tests/clients (own ZooKeeper chroot), and each test uses its
own topics, made with `tests.support.topics.create_topic`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from broker.zk.server import ZooKeeperServer
from tests.support.brokers import BrokerProcess, chrooted_broker
from tests.support.tools import ROOT


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    from pipeline import register

    # Spark's Python workers must run this interpreter (it has pyarrow and the project), and
    # must find the project even when it is not installed into the interpreter.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    scratch = tmp_path_factory.mktemp("spark")
    session = (SparkSession.builder.master("local[2]").appName("minibroker-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.local.dir", str(scratch / "local"))
               .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_broker(tmp_path_factory: pytest.TempPathFactory,
                 zk_server_session: ZooKeeperServer) -> Iterator[BrokerProcess]:
    """A broker with the default auto.create.topics.enable=true: readers must still not create topics."""
    with chrooted_broker(tmp_path_factory.mktemp("sparkbroker"), zk_server_session.connect_string) as b:
        yield b
