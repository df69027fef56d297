"""Real Spark (local mode) against one real broker on the session's real ZooKeeper.

Starting Spark takes 10-20 s, so one SparkSession serves every test here; the broker is
started once per module as in tests/clients (own ZooKeeper chroot), and each test uses its
own topics. Topics are created with the project's own client (CreateTopics v1).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator

import pytest

from fetcher.connection import KafkaConnection
from tests.support.brokers import ROOT, BrokerProcess

CREATE_TOPICS, METADATA = 19, 3


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
def spark_broker(tmp_path_factory: pytest.TempPathFactory, zk_server_session) -> Iterator[BrokerProcess]:  # noqa: ANN001
    """A broker with the default auto.create.topics.enable=true: readers must still not create topics."""
    workdir = tmp_path_factory.mktemp("sparkbroker")
    b = BrokerProcess(workdir, 0, zk_server_session.connect_string + f"/{workdir.name}")
    b.start()
    yield b
    code = b.stop()
    assert code == 0, b.log()


async def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    host, port = bootstrap.rsplit(":", 1)
    async with await KafkaConnection.open(host, int(port)) as conn:
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                            "assignments": [], "configs": []}], "timeout_ms": 10000}
        resp = await conn.request(CREATE_TOPICS, 1, body)
        code = resp["topics"][0]["error_code"]
        assert code == 0, f"CreateTopics {name}: error {code}"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            md = await conn.request(METADATA, 1, {"topics": [{"name": name}]})
            t = md["topics"][0]
            if t["error_code"] == 0 and len(t["partitions"]) == partitions and all(
                    p["leader_id"] >= 0 for p in t["partitions"]):
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no leaders for {name}")


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    asyncio.run(_create_topic(broker.bootstrap, name, partitions))


async def _topic_names(bootstrap: str) -> set[str]:
    host, port = bootstrap.rsplit(":", 1)
    async with await KafkaConnection.open(host, int(port)) as conn:
        md = await conn.request(METADATA, 1, {"topics": None})
        return {t["name"] for t in md["topics"]}


def topic_names(broker: BrokerProcess) -> set[str]:
    """Every topic on the broker, asked without naming any (so nothing gets auto-created)."""
    return asyncio.run(_topic_names(broker.bootstrap))


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes, int | None]],
            **conf: object) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of each message, produced with confluent-kafka, acks=all."""
    from confluent_kafka import Producer

    delivered: list[tuple[int, int, bytes | None, bytes]] = []
    failures: list[str] = []

    def report(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            failures.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": False,
                  **conf})
    for key, value, partition in messages:
        kwargs = {} if partition is None else {"partition": partition}
        while True:
            try:
                p.produce(topic, key=key, value=value, on_delivery=report, **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    assert failures == []
    return delivered
