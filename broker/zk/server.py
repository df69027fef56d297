"""A standalone ZooKeeper server as a plain child process, for tests, benches and `minibroker cluster up`.

Debian's zkServer.sh ignores the config it is given, so the server class is started directly
with the jars Debian installs. The port is chosen once and kept across restarts, so clients
reconnect to the same address and keep their sessions if the restart is quick enough.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # socket stubs type the address as Any
        return port


class ZooKeeperServer:
    def __init__(self, data_dir: str | Path, port: int = 0, tick_ms: int = 500, bind: str = "127.0.0.1") -> None:
        self.data_dir = Path(data_dir)
        self.bind = bind
        self.port = port or _free_port()
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else self._pid

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        # A short tick lets tests use short sessions (the minimum session timeout is 2 ticks).
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.bind}\n"
            "admin.enableServer=false\n"
            "maxClientCnxns=0\n"
            "4lw.commands.whitelist=ruok,srvr\n"
        )
        return cfg

    def command(self) -> list[str]:
        return ["java", "-Xmx256m", "-cp", CLASSPATH, MAIN, str(self._write_config())]

    def _spawn(self, detached: bool) -> subprocess.Popen[bytes]:
        command = self.command()
        log = open(self.log_path, "ab")
        try:
            return subprocess.Popen(command, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=detached)
        finally:
            log.close()

    def _wait_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{self._log_tail()}")
            try:
                # `ruok` answers before the server serves; `srvr` reports a version only once it
                # does, and it is the very probe aiozk sends before each connection.
                if b"Zookeeper version:" in self._four_letters(b"srvr"):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"ZooKeeper not serving on {self.connect_string} after {timeout}s:\n{self._log_tail()}")

    def _four_letters(self, word: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
            s.sendall(word)
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks)

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 20, wait: bool = True) -> None:
        """Starts the server; without `wait`, returns at once (`wait_up` later: the JVM takes
        about half a second to serve, which a caller may spend on other work)."""
        # A second server on the same port would fail to bind while the check below saw the first.
        if self.running():
            raise RuntimeError(f"ZooKeeper already running on {self.connect_string} (pid {self.pid})")
        self.proc = self._spawn(detached=False)
        if wait:
            self._wait_up(timeout)

    def wait_up(self, timeout: float = 20) -> None:
        """Until a server started with `start(wait=False)` serves (RuntimeError if it exited)."""
        self._wait_up(timeout)

    def start_detached(self, timeout: float = 20) -> int:
        """Starts a server that outlives this process (its own session); returns its pid."""
        if self.running():
            raise RuntimeError(f"ZooKeeper already running on {self.connect_string} (pid {self.pid})")
        self.proc = self._spawn(detached=True)
        self._wait_up(timeout)
        self._pid = self.proc.pid
        return self._pid

    def stop(self, timeout: float = 10) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self, timeout: float = 20) -> None:
        self.stop()
        self.start(timeout)


def main(argv: list[str] | None = None) -> None:
    """`python -m broker.zk.server --dir D --port 2181 --bind 0.0.0.0`: ZooKeeper in the
    foreground (the container image's ZooKeeper), logging to stdout; exec'd, so signals reach Java."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m broker.zk.server")
    parser.add_argument("--dir", default="/var/lib/zookeeper")
    parser.add_argument("--port", type=int, default=2181)
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--tick-ms", type=int, default=2000)  # ZooKeeper's own default
    args = parser.parse_args(argv)
    server = ZooKeeperServer(args.dir, args.port, args.tick_ms, args.bind)
    command = server.command()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
