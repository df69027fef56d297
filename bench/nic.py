"""KIP-73 on real network interfaces: replication throttling measured on shaped veth links.

The compose cluster (docker/docker-compose.yml + docker/bench-nic.yml, which grants NET_ADMIN)
with each broker's egress on the `internal` network shaped by `tc ... tbf` to RATE. A topic
`move` (6 partitions on brokers [1, 2], leader 1) holds a backlog; a steady client produces
acks=all to `steady` (3 partitions led by broker 1, replicas 1, 2, 3), so its replication
crosses broker 1's shaped link, the link the move also uses. Then `move` is reassigned to
[1, 2, 3]: once unthrottled, once with `--throttle T`. Side by side: the move's duration and
catch-up rate (as a fraction of the link), and the steady client's throughput and produce latency
p50/p99 before and during each move.

    python -m bench.nic [--rate-mbit 40] [--throttle-mb 1] [--backlog-mb 40]

Needs a Docker engine (scripts/run test sets one up). Writes bench/out/nic.json and nic.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.common import machine, progress, save_figure, write_json
from tests.support.compose import ComposeCluster, build_image, docker_available, sweep_leftovers
from tests.support.tools import ROOT
from tests.support.topics import create_topic
from tests.support.traffic import produce_bytes

MB = 1_000_000
MOVE_PARTITIONS = 6
STEADY_PARTITIONS = 3
STEADY_RATE = 200  # messages/s of 1 KB
OVERRIDE = ROOT / "docker" / "bench-nic.yml"


def shape(cluster: ComposeCluster, rate_mbit: int) -> None:
    """tbf on each broker's interface on `internal`: its egress there (replication, controller)."""
    for b in (1, 2, 3):
        c = cluster.container(f"broker{b}")
        fmt = "{{json .NetworkSettings.Networks}}"
        ip = json.loads(cluster.docker("inspect", "--format", fmt, c).stdout)[cluster.internal_network]["IPAddress"]
        out = cluster.exec(f"broker{b}", "ip", "-o", "-4", "addr", "show").stdout
        iface = next(line.split()[1] for line in out.splitlines() if f" {ip}/" in line)
        # burst: at least rate/HZ; 64 KB keeps tbf accurate at these rates.
        cluster.exec(f"broker{b}", "tc", "qdisc", "replace", "dev", iface, "root", "tbf",
                     "rate", f"{rate_mbit}mbit", "burst", "64kb", "latency", "100ms")


class SteadyClient:
    """acks=all at a fixed rate; (time acknowledged, latency) of each message."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0,
                      "enable.idempotence": False, "message.timeout.ms": 120000})
        value = b"s" * 1000
        sent = 0
        t0 = time.monotonic()
        while not self.stop.is_set():
            started = time.monotonic()

            def done(err, msg, started: float = started) -> None:  # noqa: ANN001
                if err is None:
                    now = time.monotonic()
                    self.samples.append((now, now - started))

            p.produce("steady", value, partition=sent % STEADY_PARTITIONS, on_delivery=done)
            sent += 1
            p.poll(0)
            ahead = sent / STEADY_RATE - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        p.flush(60)

    def window(self, start: float, end: float) -> dict:
        lat = sorted(latency for t, latency in self.samples if start <= t < end)
        if not lat:
            return {"messages": 0}
        return {"messages": len(lat), "throughput_msgs_per_s": round(len(lat) / (end - start), 1),
                "latency_p50_ms": round(statistics.median(lat) * 1000, 1),
                "latency_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1)}


def reassign(cluster: ComposeCluster, throttle: int | None) -> None:
    plan = {"version": 1, "partitions": [{"topic": "move", "partition": p, "replicas": [1, 2, 3]}
                                          for p in range(MOVE_PARTITIONS)]}
    cluster.exec("zookeeper", "sh", "-c", f"echo '{json.dumps(plan)}' > /tmp/plan.json")
    cmd = ["minibroker", "reassign", "--zookeeper", "127.0.0.1:2181", "--execute",
           "--reassignment-json-file", "/tmp/plan.json"]
    if throttle:
        cmd += ["--throttle", str(throttle)]
    cluster.exec("zookeeper", *cmd)


def moved(cluster: ComposeCluster) -> bool:
    r = cluster.exec("zookeeper", "minibroker", "reassign", "--zookeeper", "127.0.0.1:2181", "--verify",
                     "--reassignment-json-file", "/tmp/plan.json", check=False)
    return "in progress" not in r.stdout and "completed successfully" in r.stdout


def run(image: str, label: str, rate_mbit: int, throttle: int | None, backlog: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="minibroker-nic-") as tmp:
        cluster = ComposeCluster(image, Path(tmp), (OVERRIDE,))
        try:
            progress(f"[{label}] starting the compose cluster ({cluster.project})")
            cluster.up()
            asyncio.run(create_topic(cluster.bootstrap, "move",
                                     assignment={p: [1, 2] for p in range(MOVE_PARTITIONS)}))
            asyncio.run(create_topic(cluster.bootstrap, "steady",
                                     assignment={p: [1, 2, 3] for p in range(STEADY_PARTITIONS)}))
            progress(f"[{label}] producing a {backlog / MB:.0f} MB backlog to 'move'")
            # acks=all: the follower on broker 2 holds the backlog before the links are shaped,
            # so the baseline below is not a catch-up of its own.
            produce_bytes(cluster.bootstrap, "move", MOVE_PARTITIONS, backlog, acks="all")
            shape(cluster, rate_mbit)
            client = SteadyClient(cluster.bootstrap)
            client.thread.start()
            time.sleep(15)
            t_start = time.monotonic()
            progress(f"[{label}] reassigning 'move' to [1, 2, 3], throttle {throttle or 'none'}")
            reassign(cluster, throttle)
            while not moved(cluster):
                time.sleep(1)
                if time.monotonic() - t_start > 900:
                    raise TimeoutError("the move did not finish in 15 minutes")
            t_end = time.monotonic()
            time.sleep(5)
            client.stop.set()
            client.thread.join(90)
            duration = t_end - t_start
            link = rate_mbit * 1_000_000 / 8
            result = {
                "run": label, "link_mbit_per_s": rate_mbit, "throttle_bytes_per_s": throttle,
                "backlog_bytes": backlog, "move_seconds": round(duration, 1),
                "catch_up_bytes_per_s": round(backlog / duration),
                "catch_up_fraction_of_link": round(backlog / duration / link, 3),
                "steady_before": client.window(t_start - 12, t_start),
                "steady_during_move": client.window(t_start, t_end),
                "latency_series": [(round(t - t_start, 2), round(latency * 1000, 1))
                                   for t, latency in client.samples[::5]],
            }
            progress(f"[{label}] moved in {duration:.1f} s; steady during: {result['steady_during_move']}")
            return result
        finally:
            cluster.down()


def plot(results: list[dict], rate_mbit: int) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4))
    for r in results:
        xs = [x for x, _ in r["latency_series"]]
        ys = [y for _, y in r["latency_series"]]
        ax.plot(xs, ys, ".", markersize=2, label=f"{r['run']} (move {r['move_seconds']} s)")
        ax.axvline(r["move_seconds"], linestyle="--", linewidth=0.8)
    ax.set_xlabel("seconds from the start of the move")
    ax.set_ylabel("acks=all produce latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"Steady client during a reassignment, links shaped to {rate_mbit} Mbit/s")
    ax.legend()
    return save_figure(fig, "nic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-mbit", type=int, default=40)
    parser.add_argument("--throttle-mb", type=float, default=1.0)
    parser.add_argument("--backlog-mb", type=float, default=40.0)
    args = parser.parse_args()
    why = docker_available()
    if why:
        raise SystemExit(f"bench.nic needs Docker: {why}")
    sweep_leftovers()
    image = build_image()
    backlog = int(args.backlog_mb * MB)
    throttle = int(args.throttle_mb * MB)
    results = [run(image, "unthrottled", args.rate_mbit, None, backlog),
               run(image, f"throttled {args.throttle_mb:g} MB/s", args.rate_mbit, throttle, backlog)]
    path = plot(results, args.rate_mbit)
    for r in results:
        r.pop("latency_series")
    write_json("nic", {"machine": machine(), "link_mbit_per_s": args.rate_mbit, "runs": results,
                       "plot": str(path.relative_to(ROOT))})


if __name__ == "__main__":
    main()
