"""What every bench shares: a throwaway ZooKeeper and broker processes, machine facts, JSON and plot output."""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.zk.server import ZooKeeperServer
from tests.support.brokers import BrokerProcess, start_together
from tests.support.tools import ROOT

OUT = ROOT / "bench" / "out"


def machine() -> dict[str, object]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "date": time.strftime("%Y-%m-%d")}


def py_spy() -> str:
    """The venv's py-spy (installed with the bench extra), else one on PATH: benches run as
    `.venv/bin/python -m bench.x` without the venv on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else (shutil.which("py-spy") or "py-spy")


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextmanager
def cluster(brokers: int = 1, source: Path | None = None, **overrides: str) -> Iterator[list[BrokerProcess]]:
    """Brokers on a throwaway ZooKeeper; `source` runs them from another tree (see `source_tree`)."""
    # MINIBROKER_BENCH_KEEP=1 keeps the brokers' logs and data for a look afterwards.
    keep = bool(os.environ.get("MINIBROKER_BENCH_KEEP"))
    work = Path(tempfile.mkdtemp(prefix="minibroker-bench-"))
    zk = ZooKeeperServer(work / "zk")
    zk.start()
    procs = [BrokerProcess(work, i, zk.connect_string, overrides, metrics=True, source=source)
             for i in range(brokers)]
    try:
        start_together(procs, 60)
        yield procs
    finally:
        for b in procs:
            b.stop()
        zk.stop()
        if keep:
            progress(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


@contextmanager
def source_tree(ref: str) -> Iterator[Path]:
    """Git `ref` of this repository unpacked into a temporary directory, to run brokers from
    (a bench's "before"); removed afterwards."""
    import subprocess

    work = Path(tempfile.mkdtemp(prefix="minibroker-src-"))
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_average() -> list[float]:
    """The machine's 1, 5 and 15-minute load averages (`uptime`): benches share the machine."""
    return [round(x, 2) for x in os.getloadavg()]


def save_figure(fig, name: str, dpi: int = 100) -> Path:  # noqa: ANN001 - a matplotlib Figure
    """The figure, laid out, as bench/out/<name>.png."""
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.png"
    fig.savefig(path, dpi=dpi)
    return path


def write_json(name: str, data: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(data, indent=2))
    return path
