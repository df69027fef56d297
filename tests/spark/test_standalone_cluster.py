"""The source and the sink on a real Spark standalone cluster against three real brokers.

A Spark master and two workers are started from the installed pyspark (`bin/spark-class`, the
launcher Spark's own sbin scripts use), bound to 127.0.0.1 on free ports with small memory;
the drivers are separate processes (tests/spark/cluster_job.py), since a process holds one
SparkContext and the local-mode session of the other modules may be alive. Executors run this
interpreter (PYSPARK_PYTHON) with this tree on PYTHONPATH. Every Spark process is in its own
process group, killed at the end, and the test checks none is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from broker.zk.server import ZooKeeperServer  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.readback import read_topic  # noqa: E402
from tests.support.tools import ROOT  # noqa: E402
from tests.support.traffic import produce_messages  # noqa: E402

pytestmark = pytest.mark.integration


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_LOG_DIR": str(workdir / "logs"),
        "SPARK_CONF_DIR": str(workdir / "conf"),  # empty: no site configuration leaks in
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    })
    return env


class SparkStandalone:
    """A master and `workers` workers (1 core, 768 MB each), each a process group of its own."""

    def __init__(self, workdir: Path, workers: int = 2) -> None:
        self.workdir = workdir
        (workdir / "conf").mkdir(parents=True, exist_ok=True)
        self.env = spark_env(workdir)
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers = workers

    def _launch(self, name: str, *args: str) -> None:
        log = (self.workdir / f"{name}.out").open("wb")
        self.procs.append(subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=self.env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self) -> None:
        self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            work = self.workdir / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self._launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                         "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", "1",
                         "--memory", "768m", "--work-dir", str(work))
        deadline = time.monotonic() + 120
        while self.alive_workers() < self.workers:
            for p in self.procs:
                assert p.poll() is None, self.logs()
            assert time.monotonic() < deadline, f"workers did not register: {self.logs()}"
            time.sleep(1)

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state()["workers"] if w["state"] == "ALIVE")
        except (OSError, ValueError):
            # ValueError: while the master's UI is still starting (pyspark 4.3), its port answers
            # /json/ with the HTML page before the JSON handler is attached.
            return 0

    def logs(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
                         for f in sorted(self.workdir.glob("*.out")))

    def stop(self) -> None:
        """SIGTERM to every group (workers end their executors and Python workers), then SIGKILL."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in reversed(self.procs):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(_group_alive(p.pid) for p in self.procs):
                time.sleep(0.5)
        for p in self.procs:
            p.wait(10)

    def leftovers(self) -> list[int]:
        return [p.pid for p in self.procs if _group_alive(p.pid)]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # A zombie leader keeps the group "alive" for killpg: look for any live member instead.
    out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
    return any(not s.startswith("Z") for s in out)


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("three-brokers")
    zk = ZooKeeperServer(workdir / "zk")
    zk.start()
    loop = asyncio.new_event_loop()
    try:
        cluster = loop.run_until_complete(Cluster.start(workdir, zk.connect_string))
        try:
            yield cluster
        finally:
            loop.run_until_complete(cluster.close())
    finally:
        loop.close()
        zk.stop()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    cluster = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        assert cluster.leftovers() == [], "Spark processes outlived the test"


def run_job(spark: SparkStandalone, bootstrap: str, workdir: Path, *args: str,
            background: bool = False) -> subprocess.Popen[bytes]:
    log = (workdir / f"driver-{args[0]}.out").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "tests.spark.cluster_job", spark.url, bootstrap, str(workdir), *args],
                            env=spark.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    if not background:
        finish(proc, workdir, args[0])
    return proc


def finish(proc: subprocess.Popen[bytes], workdir: Path, action: str, timeout: float = 600) -> None:
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert code == 0, (workdir / f"driver-{action}.out").read_text()[-5000:]


def create(cluster: Cluster, name: str, partitions: int) -> None:
    asyncio.run(_create(cluster, name, partitions))


async def _create(cluster: Cluster, name: str, partitions: int) -> None:
    from tests.support.topics import create_topic

    await create_topic(cluster.bootstrap, name, partitions, replication_factor=3)


def batch_of(start: int, n: int) -> list[tuple[bytes, bytes, None]]:
    return [(f"key-{i % 17}".encode(), f"row-{i}".encode(), None) for i in range(start, start + n)]


def test_batch_read_and_a_restarted_stream_to_stream_pipeline(spark_cluster: SparkStandalone, brokers: Cluster,
                                                              tmp_path: Path) -> None:
    src, dst = "cluster-in", "cluster-out"
    create(brokers, src, 4)
    create(brokers, dst, 3)
    bootstrap = brokers.bootstrap
    produced = produce_messages(bootstrap, src, batch_of(0, 4000))

    # A batch read on two executors returns exactly what was produced.
    run_job(spark_cluster, bootstrap, tmp_path, "batch", src)
    meta = json.loads((tmp_path / "batch.meta").read_text())
    assert meta == {"partitions": 4, "executors": 2}
    rows = [tuple(json.loads(line)) for line in (tmp_path / "batch.jsonl").read_text().splitlines()]
    assert sorted(rows) == sorted((p, o, k.decode(), v.decode()) for p, o, k, v in produced)

    # The stream: started, fed while it runs, stopped once caught up; fed while stopped; restarted.
    driver = run_job(spark_cluster, bootstrap, tmp_path, "stream", src, dst, background=True)
    deadline = time.monotonic() + 300
    while not (tmp_path / "running").exists():
        assert driver.poll() is None, (tmp_path / "driver-stream.out").read_text()[-5000:]
        assert time.monotonic() < deadline, "the stream processed nothing"
        time.sleep(0.5)
    for i in range(6):
        produced.extend(produce_messages(bootstrap, src, batch_of(4000 + 500 * i, 500)))
        time.sleep(1)
    ends: dict[str, int] = {}
    for p, o, _, _ in produced:
        ends[str(p)] = max(ends.get(str(p), 0), o + 1)
    (tmp_path / "stop").write_text(json.dumps(ends))
    finish(driver, tmp_path, "stream")
    first_run = json.loads((tmp_path / "stream.meta").read_text())
    assert first_run["rows"] == 7000 and first_run["batches"] >= 2

    produced += produce_messages(bootstrap, src, batch_of(7000, 3000))
    run_job(spark_cluster, bootstrap, tmp_path, "catch-up", src, dst)
    assert json.loads((tmp_path / "catch-up.meta").read_text())["rows"] == 3000

    # Every input row is in the output topic exactly once, with its header, key and upper-cased value.
    out = read_topic(bootstrap, dst, 3)
    origins: Counter[tuple[int, int]] = Counter()
    by_origin = {}
    for _, _, key, value, headers in out:
        ((name, origin),) = headers
        assert name == "src"
        so = tuple(int(x) for x in origin.decode().split(":"))
        origins[so] += 1
        by_origin[so] = (key, value)
    assert len(out) == len(produced) == 10_000
    assert set(origins.values()) == {1}
    assert by_origin == {(p, o): (k, v.upper()) for p, o, k, v in produced}
    assert spark_cluster.alive_workers() == 2
