"""Real broker processes for tests and benches: `minibroker serve` on a free port."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.ports import free_port
from tests.support.tools import ROOT


class BrokerProcess:
    """One broker's properties file, process and log, in `workdir`.

    With `metrics` the broker also serves Prometheus metrics on a free port, at `metrics_url`.
    `source` runs the broker from another source tree (an older release unpacked by
    `git archive`, to show what a change fixes); by default this one. `nofile` lowers the process's
    soft RLIMIT_NOFILE (descriptor limits reached with a few hundred partitions, not 20,000).
    `env` adds variables to the process's environment (e.g. KAFKA_OPTS naming a JAAS file).
    `log_level` is `serve --log-level` (debug: events such as log_writer.completed are logged).
    """

    def __init__(self, workdir: Path, broker_id: int, zk_connect: str, overrides: dict[str, str] | None = None,
                 metrics: bool = False, source: Path | None = None, nofile: int | None = None,
                 env: dict[str, str] | None = None, log_level: str = "info") -> None:
        self.workdir = workdir
        self.log_level = log_level
        self.env = env
        self.nofile = nofile
        self.source = source or ROOT
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
        self.metrics_url = ""
        if metrics:
            mport = free_port()
            props["metrics.listener"] = f"http://127.0.0.1:{mport}"
            self.metrics_url = f"http://127.0.0.1:{mport}/metrics"
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
        # The flag only when asked for: an older source tree (`source`) may not know it.
        level = [] if self.log_level == "info" else ["--log-level", self.log_level]
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", "serve", str(self.props), *level],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=str(self.source), preexec_fn=self._limits if self.nofile else None,
                                     env={**os.environ, **self.env} if self.env else None)
        out.close()
        if wait:
            self.wait_ready(timeout)

    def _limits(self) -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, hard))

    def open_fds(self) -> int:
        """Descriptors the broker process holds now."""
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss_bytes(self) -> int:
        """The process's resident memory (VmRSS in /proc/<pid>/status)."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no VmRSS for broker {self.broker_id}")

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

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets and its ZooKeeper session until that times out,
        and answers nothing (a hung broker, not a dead one)."""
        assert self.proc is not None and self.proc.poll() is None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`: the process runs on from where it stopped, unaware of the gap."""
        assert self.proc is not None and self.proc.poll() is None
        os.kill(self.proc.pid, signal.SIGCONT)


def start_together(brokers: list[BrokerProcess], timeout: float = 30) -> None:
    """Starts every broker at once, then waits until each has registered."""
    for b in brokers:
        b.start(wait=False)
    for b in brokers:
        b.wait_ready(timeout)


@contextlib.contextmanager
def chrooted_broker(workdir: Path, zk_connect: str, overrides: dict[str, str] | None = None) -> Iterator[BrokerProcess]:
    """A started broker 0 under its own ZooKeeper chroot (named after `workdir`); stopped at the end, cleanly.

    Several such brokers share one ZooKeeper without seeing each other's topics.
    """
    b = BrokerProcess(workdir, 0, zk_connect + f"/{workdir.name}", overrides)
    b.start()
    yield b
    code = b.stop()
    assert code == 0, b.log()
