"""What every bench shares: a throwaway ZooKeeper and broker processes, machine facts, JSON and plot output."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.zk.server import ZooKeeperServer
from tests.support.brokers import ROOT, BrokerProcess, free_port

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


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextmanager
def cluster(brokers: int = 1, **overrides: str) -> Iterator[list[BrokerProcess]]:
    # MINIBROKER_BENCH_KEEP=1 keeps the brokers' logs and data for a look afterwards.
    keep = bool(os.environ.get("MINIBROKER_BENCH_KEEP"))
    work = Path(tempfile.mkdtemp(prefix="minibroker-bench-"))
    zk = ZooKeeperServer(work / "zk")
    zk.start()
    procs = []
    for i in range(brokers):
        mport = free_port()
        b = BrokerProcess(work, i, zk.connect_string, {"metrics.listener": f"http://127.0.0.1:{mport}", **overrides})
        b.metrics_url = f"http://127.0.0.1:{mport}/metrics"
        procs.append(b)
    procs[0].zk_connect_string = zk.connect_string
    try:
        for b in procs:
            b.start()
        # Listening comes before registering in ZooKeeper; wait until every broker is in.
        deadline = time.monotonic() + 60
        while not all("broker.started" in b.log() for b in procs):
            if time.monotonic() > deadline:
                raise RuntimeError("brokers did not register")
            time.sleep(0.1)
        yield procs
    finally:
        for b in procs:
            b.stop()
        zk.stop()
        if keep:
            progress(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def create_topic(broker: BrokerProcess, name: str, partitions: int, replication_factor: int = 1) -> None:
    subprocess.run([sys.executable, "-m", "broker", "topics", "--bootstrap-server", broker.bootstrap, "--create",
                    "--topic", name, "--partitions", str(partitions), "--replication-factor",
                    str(replication_factor)], check=True, cwd=str(ROOT), timeout=120)


def write_json(name: str, data: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(data, indent=2))
    return path
