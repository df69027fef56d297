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
from pipeline.client import BrokerSession, MinibrokerError  # noqa: E402
from pipeline.options import ReadOptions  # noqa: E402
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
    ssl: str  # host:port of the SSL listener (client certificates required)
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
    port, ssl_port = free_port(), free_port()
    b = BrokerProcess(tmp, 0, connect, {
        "listener.name.ssl.ssl.client.auth": "required",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": MECH,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(me.pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca_pem),
        "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1"})
    b.props.write_text(b.props.read_text() + f"listeners=PLAINTEXT://127.0.0.1:{b.port},"
                       f"SASL_SSL://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}\n")
    b.start()
    yield SecureBroker(b, f"127.0.0.1:{port}", f"127.0.0.1:{ssl_port}", certs)
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


def test_client_certificate_from_inline_pem_options(secure_broker: SecureBroker) -> None:
    """No Spark: the options' ClientSecurity through BrokerSession to an SSL listener that requires
    a client certificate, given inline (kafka.ssl.keystore.certificate.chain + .key, encrypted,
    with kafka.ssl.key.password); without it the handshake is refused and the read fails."""
    topic = "spark-ssl-cert"
    asyncio.run(create_topic(secure_broker.broker.bootstrap, topic, 3))
    certs = secure_broker.certs
    me = certs.issue("spark-client", key_password="key-pw-Lm44")
    base = {"kafka.bootstrap.servers": secure_broker.ssl, "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.certificates": certs.ca_text,
            "subscribe": topic, "timeout.ms": "3000"}
    with_cert = {**base, "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.certificate.chain": me.chain,
                 "kafka.ssl.keystore.key": me.key, "kafka.ssl.key.password": "key-pw-Lm44"}
    with BrokerSession(ReadOptions.parse(with_cert, streaming=False).settings) as session:
        assert session.partitions(topic) == [0, 1, 2]
    with BrokerSession(ReadOptions.parse(base, streaming=False).settings) as session, \
            pytest.raises(MinibrokerError) as refused:
        session.partitions(topic)
    # TLS 1.3: the handshake completes on the client's side, then the broker closes the connection
    # (the alert's reason does not reach the client's transport; the broker logs it). Whether the
    # client meets the close writing its request or reading the answer depends on timing, and a
    # close with the client's request unread in the broker's socket is a reset.
    closed = ("is closed", "closed by the peer", "Connection reset by peer")
    assert any(words in str(refused.value) for words in closed), refused.value
    assert "reason='PEER_DID_NOT_RETURN_A_CERTIFICATE'" in secure_broker.broker.log_path.read_text()
    assert "key-pw-Lm44" not in str(refused.value)
    with pytest.raises(MinibrokerError, match="kafka.ssl.keystore.key") as wrong:
        with BrokerSession(ReadOptions.parse({**with_cert, "kafka.ssl.key.password": "not-it-Qp09"},
                                             streaming=False).settings) as session:
            session.partitions(topic)
    assert "not-it-Qp09" not in str(wrong.value)
