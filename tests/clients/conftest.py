"""One broker per client-test module, on the session's ZooKeeper; topics made with `minibroker topics`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.brokers import ROOT, BrokerProcess

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
