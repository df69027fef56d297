"""Many partitions on one broker (issue 21, deliverable 4): create, restart, shutdown, descriptors, RSS.

    python -m bench.partitions --partitions 1000,10000 [--nofile 20000] [--produce] [--profile DIR] [--keep-log DIR]
                               [--sigterm-runs K] [--busy P] [--no-kill9] [--settle S]

For each N, on a fresh ZooKeeper and one broker (its soft RLIMIT_NOFILE set to --nofile, the
machine's hard limit by default):
- create: CreateTopics of N partitions until Metadata shows every one led;
- descriptors and RSS of the broker with N empty partitions (and after one message each, with
  --produce);
- SIGTERM: until the process exits (controlled shutdown, logs closed);
- restart: from the process start until Metadata shows all N led, and until `broker.started`; the
  broker's CPU time (user + system) by then;
- kill -9 then restart: the same, plus the ZooKeeper session wait (the old registration must go).

With `--sigterm-runs K` the SIGTERM and the restart after it are repeated K times on the same
log (each SIGTERM's exit time and the phases the broker timed, from its `broker.stopped` and
`log.closed` events, are listed in `sigterm_runs`); `--busy P` runs P busy-loop processes
meanwhile (CPU contention, as on a shared machine); `--no-kill9` leaves out the kill -9 restart;
`--settle S` waits S seconds between creating (and producing) and the first SIGTERM, as on an
established broker (new partitions' index files are made in the background meanwhile).

With `--keep-log DIR` the broker's log (its timestamped start-up phases: `log.loaded`,
`controller.failover_sent`, `leader_and_isr.applied`, `update_metadata.applied`) is kept there, and
the restarts' wall-clock starts are in the JSON (`restart_at_unix`) to line it up with.

With `--profile DIR`, py-spy records the broker during the create, the SIGTERM, the restart and the kill -9
restart (DIR/<n>-<phase>.txt, collapsed stacks; py-spy attaches a moment after the process
starts, and the sampling costs the broker some CPU, so profiled runs are for shares, not times).

Prints JSON (bench/out/partitions.json) and draws bench/out/partitions.png. The machine's load
(`/proc/loadavg`) is recorded at the start and end of each run: the machine is shared.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import multiprocessing
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import machine, progress, py_spy, save_figure, write_json
from broker.zk.server import ZooKeeperServer
from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from tests.support.brokers import BrokerProcess
from tests.support.wire import connect, produce


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system), from /proc: a figure the machine's load moves less."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def led(conn: KafkaConnection, topic: str, n: int) -> bool:
    md = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": topic}]}, 60)
    parts = md["topics"][0]["partitions"]
    return len(parts) == n and all(p["leader_id"] >= 0 for p in parts)


async def wait_led(b: BrokerProcess, topic: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with await connect(b) as conn:
                while time.monotonic() < deadline:
                    if await led(conn, topic, n):
                        return
                    await asyncio.sleep(0.1)
        except (OSError, ConnectionError, TimeoutError):
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{topic}: not all {n} partitions led after {timeout} s")


async def create(b: BrokerProcess, topic: str, n: int, timeout: float) -> float:
    start = time.monotonic()
    async with await connect(b) as conn:
        spec = {"name": topic, "num_partitions": n, "replication_factor": 1, "assignments": [], "configs": []}
        resp = await conn.request(ApiKey.CREATE_TOPICS, 1, {"topics": [spec], "timeout_ms": int(timeout * 1000)},
                                  timeout + 10)
        assert resp["topics"][0]["error_code"] == 0, resp
    await wait_led(b, topic, n, timeout)
    return time.monotonic() - start


async def produce_each(b: BrokerProcess, topic: str, n: int) -> float:
    start = time.monotonic()
    async with await connect(b) as conn:
        for p in range(n):
            resp = await produce(conn, topic, p, [(None, b"x" * 100)])
            assert resp["error_code"] == 0, (p, resp)
    return time.monotonic() - start


def started_after(b: BrokerProcess, t0: float, timeout: float) -> float:
    while time.monotonic() - t0 < timeout:
        if b._started_logged():
            return time.monotonic() - t0
        time.sleep(0.02)
    raise TimeoutError("broker.started not logged")


def _spin() -> None:
    while True:
        pass


class Busy:
    """`n` processes spinning a core each (a loaded machine), stopped by `stop`."""

    def __init__(self, n: int) -> None:
        self.procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]
        for proc in self.procs:
            proc.start()

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.join()


_NUMBER = re.compile(r"(\w+)=([0-9]+(?:\.[0-9]+)?)\b")


def shutdown_phases(text: str) -> dict[str, object]:
    """The last shutdown's timings from the broker's log: `broker.stopped` (each phase of
    Broker.stop) and `log.closed` (the steps of closing the logs)."""
    out: dict[str, object] = {}
    for line in reversed(text.splitlines()):
        if "broker.stopped" in line and "phases" not in out:
            m = re.search(r"phases=(\{.*?\})", line)
            if m:
                out["phases"] = ast.literal_eval(m.group(1))
            t = re.search(r"total_s=([0-9.]+)", line)
            if t:
                out["total_s"] = float(t.group(1))
        elif "log.closed" in line and "logs" not in out:
            out["logs"] = {k: float(v) for k, v in _NUMBER.findall(line) if k.endswith("_s")}
        elif "broker.stopping" in line:
            break
    return out


def sigterm(b: BrokerProcess, timeout: float, spy: Profile) -> dict[str, object]:
    """SIGTERM until the process exits; the exit code and the phases the broker logged."""
    assert b.proc is not None
    t0 = time.monotonic()
    at = time.time()
    b.proc.send_signal(signal.SIGTERM)
    code = b.proc.wait(timeout)
    exit_s = round(time.monotonic() - t0, 2)
    spy.stop()
    return {"exit_s": exit_s, "exit_code": code, "at_unix": round(at, 3), "load": loadavg(),
            **shutdown_phases(b.log_path.read_text())}


class Profile:
    """py-spy recording one phase of the broker process (a no-op without a directory)."""

    def __init__(self, directory: Path | None, name: str, pid: int) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        if directory is None:
            return
        directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--rate", "200", "--nonblocking", "--format", "raw",
                                      "--output", str(directory / f"{name}.txt")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)  # attached before the phase starts

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
            self.proc.wait(60)


def run_one(n: int, nofile: int, do_produce: bool, timeout: float,
            profile: Path | None = None, keep_log: Path | None = None, sigterm_runs: int = 1,
            busy_n: int = 0, kill9: bool = True, settle: float = 0) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="minibroker-bench-partitions-"))
    zk = ZooKeeperServer(work / "zk")
    zk.start()
    b = BrokerProcess(work, 0, zk.connect_string, {"zookeeper.session.timeout.ms": "6000"}, nofile=nofile)
    out: dict[str, object] = {"partitions": n, "nofile": nofile, "load_start": loadavg()}
    try:
        b.start(timeout=60)
        assert b.proc is not None
        out["empty_broker"] = {"fds": fds(b.proc.pid), "rss_mb": round(rss_mb(b.proc.pid), 1)}
        progress(f"{n}: creating")
        spy = Profile(profile, f"{n}-create", b.proc.pid)
        out["create_s"] = round(asyncio.run(create(b, "bench", n, timeout)), 2)
        spy.stop()
        out["create_cpu_s"] = cpu_s(b.proc.pid)  # broker CPU from its start to all created and led
        out["created"] = {"fds": fds(b.proc.pid), "rss_mb": round(rss_mb(b.proc.pid), 1)}
        if do_produce:
            progress(f"{n}: one message to each partition")
            out["produce_each_s"] = round(asyncio.run(produce_each(b, "bench", n)), 2)
            out["produced"] = {"fds": fds(b.proc.pid), "rss_mb": round(rss_mb(b.proc.pid), 1)}
        if settle:  # an established broker: new partitions' index files made in the background meanwhile
            progress(f"{n}: settling {settle} s")
            time.sleep(settle)
        busy = Busy(busy_n)
        try:
            runs = []
            for i in range(max(1, sigterm_runs)):
                if do_produce and i:  # each shutdown closes logs with something new to write
                    asyncio.run(produce_each(b, "bench", n))
                progress(f"{n}: SIGTERM ({i + 1}/{max(1, sigterm_runs)}, busy {busy_n})")
                spy = Profile(profile, f"{n}-sigterm" + (f"-{i}" if i else ""), b.proc.pid)
                runs.append(sigterm(b, timeout, spy))
                progress(f"{n}: SIGTERM exit {runs[-1]['exit_s']} s, phases {runs[-1].get('phases')}")
                progress(f"{n}: restart after SIGTERM")
                restart_at = round(time.time(), 3)  # to line up with the broker log's timestamps
                t0 = time.monotonic()
                b.start(wait=False)
                spy = Profile(profile, f"{n}-restart" + (f"-{i}" if i else ""), b.proc.pid)
                started_s = round(started_after(b, t0, timeout), 2)
                asyncio.run(wait_led(b, "bench", n, timeout))
                led_s = round(time.monotonic() - t0, 2)
                spy.stop()
                if i == 0:
                    out["restart_at_unix"] = restart_at
                    out["restart_started_s"] = started_s
                    out["restart_all_led_s"] = led_s
                    out["restart_cpu_s"] = cpu_s(b.proc.pid)  # broker CPU from its start to all led
                    out["restarted"] = {"fds": fds(b.proc.pid), "rss_mb": round(rss_mb(b.proc.pid), 1)}
                runs[-1]["restart_all_led_s"] = led_s
        finally:
            busy.stop()
        out["sigterm_exit_s"] = runs[0]["exit_s"]
        out["sigterm_exit_code"] = runs[0]["exit_code"]
        out["sigterm_runs"] = runs
        out["busy_processes"] = busy_n
        out["settle_s"] = settle
        if not kill9:
            return out
        progress(f"{n}: kill -9 and restart")
        b.kill()
        out["kill9_restart_at_unix"] = round(time.time(), 3)
        t0 = time.monotonic()
        b.start(wait=False)
        spy = Profile(profile, f"{n}-kill9-restart", b.proc.pid)
        out["kill9_restart_started_s"] = round(started_after(b, t0, timeout), 2)
        asyncio.run(wait_led(b, "bench", n, timeout))
        out["kill9_restart_all_led_s"] = round(time.monotonic() - t0, 2)
        out["kill9_restart_cpu_s"] = cpu_s(b.proc.pid)
        spy.stop()
        out["storage_errors_logged"] = b.log_path.read_text().count("log.open_files_exhausted")
    finally:
        b.stop(timeout)
        zk.stop()
        out["load_end"] = loadavg()
        if keep_log is not None and b.log_path.exists():
            keep_log.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(b.log_path, keep_log / f"{n}-broker.log")
        shutil.rmtree(work, ignore_errors=True)
    return out


def plot(results: list[dict[str, object]]) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("create_s", "create"), ("sigterm_exit_s", "SIGTERM exit"), ("restart_all_led_s", "restart: all led"),
            ("kill9_restart_all_led_s", "kill -9 restart: all led")]
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        xs = [k + i * width for k in range(len(keys))]
        ax_t.bar(xs, [float(r.get(key, 0) or 0) for key, _ in keys], width, label=f"{r['partitions']} partitions")
    ax_t.set_xticks([k + width * (len(results) - 1) / 2 for k in range(len(keys))], [label for _, label in keys],
                    rotation=15)
    ax_t.set_ylabel("seconds")
    ax_t.set_title("one broker, many partitions")
    ax_t.legend()
    ns = [int(str(r["partitions"])) for r in results]
    ax_r.plot(ns, [r["created"]["fds"] for r in results], "o-", label="descriptors")  # type: ignore[index]
    ax_r2 = ax_r.twinx()
    ax_r2.plot(ns, [r["created"]["rss_mb"] for r in results], "s--", color="tab:red", label="RSS MB")  # type: ignore[index]
    ax_r.set_xlabel("partitions")
    ax_r.set_ylabel("descriptors")
    ax_r2.set_ylabel("RSS (MB)")
    ax_r.set_title("after creation")
    return save_figure(fig, "partitions")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="1000", help="comma-separated partition counts")
    ap.add_argument("--nofile", type=int, default=0, help="the broker's soft RLIMIT_NOFILE (default: the hard limit)")
    ap.add_argument("--produce", action="store_true", help="one 100-byte message to each partition before each SIGTERM")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--profile", type=Path, help="record py-spy profiles of the shutdown and restarts here")
    ap.add_argument("--keep-log", type=Path, help="copy the broker's log (the phases' timestamped events) here")
    ap.add_argument("--sigterm-runs", type=int, default=1, help="SIGTERM and restart this many times on the same log")
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes spinning during the SIGTERM runs")
    ap.add_argument("--no-kill9", action="store_true", help="leave out the kill -9 restart")
    ap.add_argument("--settle", type=float, default=0, help="seconds to wait after creating before the first SIGTERM")
    args = ap.parse_args()
    nofile = args.nofile or resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    results = [run_one(int(n), nofile, args.produce, args.timeout, args.profile, args.keep_log,
                       args.sigterm_runs, args.busy, not args.no_kill9, args.settle)
               for n in args.partitions.split(",")]
    data = {"machine": machine(), "results": results}
    write_json("partitions", data)
    progress(f"plot: {plot(results)}")


if __name__ == "__main__":
    main()
