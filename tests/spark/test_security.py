"""The `minibroker` source and sink over SASL_SSL with SCRAM-SHA-512 (issue 20), configured with
Spark's Kafka options (`kafka.security.protocol`, `kafka.ssl.truststore.*`, `kafka.sasl.*`).

One broker: PLAINTEXT for the brokers and the test's own setup, SASL_SSL for Spark (Metadata on
it names its SASL_SSL address, so the partition reads and writes go there too). One Spark job
writes, one reads back, one fails on a wrong password; no password appears in the failure, in
the query's plan (which Spark logs and shows in its UI) or in the broker's log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from broker.zk.server import ZooKeeperServer  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.tls import Certificates  # noqa: E402
from tests.support.tools import configs  # noqa: E402
from tests.support.topics import create_topic  # noqa: E402
from tests.support.zookeeper import zk_connect  # noqa: E402

pytestmark = pytest.mark.integration

MECH = "SCRAM-SHA-512"
PASSWORD = "spark-pw-Hq61"
WRONG = "not-sparks-pw-Jv20"


@dataclass
class SecureBroker:
    broker: BrokerProcess
    sasl_ssl: str  # host:port of the SASL_SSL listener
    certs: Certificates


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[
        SecureBroker]:
    tmp = tmp_path_factory.mktemp("sparksasl")
    connect = zk_server_session.connect_string + f"/{tmp.name}"

    async def chroot() -> None:
        async with zk_connect(zk_server_session) as client:
            await client.ensure_path(f"/{tmp.name}")
    asyncio.run(chroot())
    configs(connect, "--entity-type", "users", "--entity-name", "spark", "--alter", "--add-config",
            f"{MECH}=[password={PASSWORD}]", check=True)
    certs = Certificates(tmp)
    me = certs.issue("broker", "127.0.0.1", "localhost", unit="brokers")
    port = free_port()
    b = BrokerProcess(tmp, 0, connect, {
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": MECH,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(me.pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca_pem),
        "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1"})
    b.props.write_text(b.props.read_text() + f"listeners=PLAINTEXT://127.0.0.1:{b.port},"
                       f"SASL_SSL://127.0.0.1:{port}\n")
    b.start()
    yield SecureBroker(b, f"127.0.0.1:{port}", certs)
    assert b.stop() == 0, b.log()


def _jaas(password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="spark" password="{password}";'


def test_read_and_write_over_sasl_ssl_scram(spark, secure_broker: SecureBroker) -> None:  # noqa: ANN001
    topic = "spark-sasl-ssl"
    asyncio.run(create_topic(secure_broker.broker.bootstrap, topic, 2))
    common = {"kafka.bootstrap.servers": secure_broker.sasl_ssl, "kafka.security.protocol": "SASL_SSL",
              "kafka.sasl.mechanism": MECH, "topic": topic, "timeout.ms": "20000"}
    # The sink with the CA inline (ssl.truststore.certificates), the source with its file.
    sink = {**common, "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.certificates": secure_broker.certs.ca_text, "kafka.sasl.jaas.config": _jaas(PASSWORD)}
    source = {**common, "kafka.ssl.truststore.type": "PEM",
              "kafka.ssl.truststore.location": str(secure_broker.certs.ca_pem)}

    rows = [(f"key-{i}", f"value-{i}") for i in range(500)]
    writer = spark.createDataFrame(rows, "key string, value string").repartition(2).write.format("minibroker")
    for k, v in sink.items():
        writer = writer.option(k, v)
    writer.mode("append").save()

    def read(password: str):  # noqa: ANN202
        r = spark.read.format("minibroker")
        for k, v in {**source, "kafka.sasl.jaas.config": _jaas(password)}.items():
            r = r.option(k, v)
        return r.load()

    df = read(PASSWORD)
    got = sorted((bytes(r.key).decode(), bytes(r.value).decode()) for r in df.select("key", "value").collect())
    assert got == sorted(rows)
    plan = df._jdf.queryExecution().toString()
    assert PASSWORD not in plan

    with pytest.raises(Exception) as failed:  # noqa: B017 (Spark wraps the worker's error in its own types)
        read(WRONG).collect()
    message = str(failed.value)
    assert "SASL_AUTHENTICATION_FAILED" in message and secure_broker.sasl_ssl in message, message[-3000:]
    assert WRONG not in message and PASSWORD not in message
    log = secure_broker.broker.log_path.read_text()
    assert "principal='User:spark'" in log and "sasl.authentication_failed" in log
    assert PASSWORD not in log and WRONG not in log
