"""Real broker processes for integration and client tests: `minibroker serve` on a free port."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A port that is free now and stays out of the kernel's ephemeral range.

    A port the kernel hands out (bind to 0) can be handed out again as the local port of some
    client connection before the broker binds it; choosing below the ephemeral range avoids
    that race between picking and binding.
    """
    low, _ = _ephemeral_range()
    while True:
        port = random.randrange(10000, min(low, 32768))
        if port in _handed_out:
            continue  # picked earlier for a process that may not have bound it yet
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return port


_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


class BrokerProcess:
    def __init__(self, workdir: Path, broker_id: int, zk_connect: str, overrides: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.broker_id = broker_id
        self.port = free_port()
        self.zk_connect = zk_connect
        self.log_path = workdir / f"broker-{broker_id}.log"
        self.props = workdir / f"server-{broker_id}.properties"
        props = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(workdir / f"logs-{broker_id}"),
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": "6000",
        }
        props.update(overrides or {})
        self.props.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / f"logs-{self.broker_id}"

    def start(self, wait: bool = True, timeout: float = 30) -> None:
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", "serve", str(self.props)],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=str(ROOT))
        out.close()
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.broker_id} exited {self.proc.returncode}:\n{self.log()}")
            # Ready means registered in ZooKeeper (logged as broker.started), not just listening:
            # like Kafka, the listener opens before the broker registers.
            if self._started_logged():
                return
            time.sleep(0.05)
        raise TimeoutError(f"broker {self.broker_id} not listening after {timeout}s:\n{self.log()}")

    def _started_logged(self) -> bool:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(getattr(self, "_log_start", 0))
                return b"broker.started" in f.read()
        except OSError:
            return False

    def log(self) -> str:
        try:
            return self.log_path.read_text()[-5000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def broker_factory(tmp_path: Path, zk_server) -> Iterator:  # noqa: ANN001
    started: list[BrokerProcess] = []

    def make(broker_id: int = 0, start: bool = True, **overrides: str) -> BrokerProcess:
        props = {k.replace("_", "."): v for k, v in overrides.items()}
        b = BrokerProcess(tmp_path, broker_id, zk_server.connect_string, props)
        started.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:  # noqa: ANN001
    return broker_factory(0)
