"""One broker per client-test module, on the session's ZooKeeper; topics made with `minibroker topics`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.brokers import ROOT, BrokerProcess

N_MESSAGES = 10_000


@pytest.fixture(scope="module")
def client_broker(tmp_path_factory: pytest.TempPathFactory, zk_server_session) -> Iterator[BrokerProcess]:  # noqa: ANN001
    workdir = tmp_path_factory.mktemp("clients")
    # Each module gets its own chroot so topic names never collide across modules.
    chroot = f"/{workdir.name}"
    b = BrokerProcess(workdir, 0, zk_server_session.connect_string + chroot,
                      {"auto.create.topics.enable": "false"})
    b.start()
    yield b
    code = b.stop()
    assert code == 0, b.log()


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    subprocess.run([sys.executable, "-m", "broker", "topics", "--bootstrap-server", broker.bootstrap,
                    "--create", "--topic", name, "--partitions", str(partitions), "--replication-factor", "1"],
                   check=True, cwd=str(ROOT), capture_output=True, timeout=60)


def expected_messages(tag: str, n: int = N_MESSAGES) -> list[tuple[bytes, bytes]]:
    """Keyed values of varied size, so compression and offset assignment are exercised for real.

    Printable, tab- and newline-free, so kcat's line-oriented input and output carry them unchanged.
    """
    return [(f"{tag}-key-{i % 97}".encode(), f"{tag}-value-{i}-".encode() + b"x" * (i % 50)) for i in range(n)]


def read_back_with_kafka_python(bootstrap: str, topic: str, n: int = N_MESSAGES,
                                seek_to: int | None = None) -> tuple[list[tuple[int, bytes, bytes]], list]:
    """assign + seek_to_beginning, every message of partition 0; then optionally seek and poll once."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      consumer_timeout_ms=10_000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        for m in c:
            got.append((m.offset, m.key, m.value))
            if len(got) == n:
                break
        tail = []
        if seek_to is not None:
            c.seek(tp, seek_to)
            tail = [(m.offset, m.key, m.value) for _, batch in c.poll(10_000).items() for m in batch]
        return got, tail
    finally:
        c.close()
