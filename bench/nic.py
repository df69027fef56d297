"""KIP-73 on real network interfaces: a reassignment unthrottled and throttled, on shaped veth links.

One compose cluster (docker/docker-compose.yml + docker/bench-nic.yml, which grants NET_ADMIN),
each broker's egress on the `internal` network shaped by `tc ... tbf` to RATE. Two topics hold
the same backlog, `move_free` and `move_throttled` (6 partitions each on brokers [1, 2], leader 1);
a steady client produces acks=all to `steady` (3 partitions led by broker 1, replicas 1, 2, 3), so
its replication to broker 3 crosses broker 1's shaped link and shares broker 3's fetcher with the
moves. Then, one after the other in the same run, `move_free` is reassigned to [1, 2, 3] without
a throttle and `move_throttled` with `--throttle T` (default: a fifth of the link). Side by side:
each move's duration and catch-up rate as a fraction of the link (the backlog over the move time,
and broker 1's bytes through its shaped interface, from its tx counter), and the steady client's
acknowledged messages/s and produce latency p50/p99 before and during each move.

    python -m bench.nic                     # 100 Mbit/s links, T = 0.2 of the link: ~2 min + image build
    python -m bench.nic --rate-mbit 0       # unshaped: what the brokers reach on the bridge

The steady client is bounded as Kafka's own producer is (5 requests in flight, linger 5 ms): a
broker answers one request per connection at a time (as Kafka does), so an unbounded client
sending one message per acks=all request measures its own queue, not the broker (see
docs/perf/nic.md: that was the cause of the stalls of the first exploratory run).

Needs a Docker engine (scripts/run test sets one up). The cluster is a Compose project named
`mbnic*` (never `mbtest*`, which test sessions sweep); it is removed with its networks and
volumes on the way out, also on an error or Ctrl-C/SIGTERM, and leftovers of a killed run are
swept at the start. Writes bench/out/nic.json and nic.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

from confluent_kafka import Producer

from bench.common import machine, progress, save_figure, write_json
from tests.support.compose import ComposeCluster, build_image, docker_available, sweep_leftovers
from tests.support.tools import ROOT
from tests.support.topics import create_topic
from tests.support.traffic import produce_bytes

MB = 1_000_000
PREFIX = "mbnic"
MOVE_PARTITIONS = 6
STEADY_PARTITIONS = 3
OVERRIDE = ROOT / "docker" / "bench-nic.yml"
SETTLE_S = 8.0  # after each move, before the next phase: the client's queue drains
MOVE_TIMEOUT_S = 240.0


def internal_interface(cluster: ComposeCluster, broker: int) -> str:
    fmt = "{{json .NetworkSettings.Networks}}"
    ip = json.loads(cluster.docker("inspect", "--format", fmt, cluster.container(f"broker{broker}")).stdout)[
        cluster.internal_network]["IPAddress"]
    out = cluster.exec(f"broker{broker}", "ip", "-o", "-4", "addr", "show").stdout
    return next(line.split()[1].split("@")[0] for line in out.splitlines() if f" {ip}/" in line)


def shape(cluster: ComposeCluster, ifaces: dict[int, str], rate_mbit: int) -> None:
    """tbf on each broker's interface on `internal`: its egress there (replication, controller)."""
    for b, iface in ifaces.items():
        # burst 64 KB: at least rate/HZ at these rates, and tbf stays accurate.
        cluster.exec(f"broker{b}", "tc", "qdisc", "replace", "dev", iface, "root", "tbf",
                     "rate", f"{rate_mbit}mbit", "burst", "64kb", "latency", "100ms")


def sent_bytes(cluster: ComposeCluster, broker: int, iface: str) -> int:
    """Bytes broker `broker` has sent through its internal interface (shaped or not)."""
    out = cluster.exec(f"broker{broker}", "cat", f"/sys/class/net/{iface}/statistics/tx_bytes").stdout
    return int(out.strip() or 0)


class SteadyClient:
    """acks=all at a fixed rate of 1 KB messages; (send time, ack time) of each acknowledged one."""

    def __init__(self, bootstrap: str, rate: int, bounded: bool = True) -> None:
        self.bootstrap = bootstrap
        self.rate = rate
        self.bounded = bounded
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        # Kafka's producer defaults where they matter here: at most 5 requests in flight, so
        # messages wait in the client and go out batched when the broker is slower, instead of
        # one request per message queued on the broker's connection.
        bound = {"linger.ms": 5, "max.in.flight.requests.per.connection": 5} if self.bounded else {"linger.ms": 0}
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": False,
                      "message.timeout.ms": 120000, **bound})
        value = b"s" * 1000
        sent = 0
        t0 = time.monotonic()
        while not self.stop.is_set():
            started = time.monotonic()

            def done(err, msg, started: float = started) -> None:  # noqa: ANN001
                if err is None:
                    self.samples.append((started, time.monotonic()))
                else:
                    self.errors += 1

            try:
                p.produce("steady", value, partition=sent % STEADY_PARTITIONS, on_delivery=done)
                sent += 1
            except BufferError:
                pass  # the local queue is full: this message is not offered (it counts as lost throughput)
            p.poll(0)
            ahead = sent / self.rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        p.flush(60)

    def window(self, start: float, end: float) -> dict:
        """Messages acknowledged in [start, end): their rate and latency percentiles."""
        inside = [(sent, acked) for sent, acked in self.samples if start <= acked < end]
        lat = sorted(acked - sent for sent, acked in inside)
        if not lat:
            return {"seconds": round(end - start, 1), "messages": 0, "throughput_msgs_per_s": 0.0}
        # The longest time without an acknowledgement (from the window's start, between acks,
        # to its end): a stall that a throughput averaged over the window hides.
        times = [start, *sorted(acked for _, acked in inside), end]
        stall = max(b - a for a, b in zip(times, times[1:], strict=False))
        # Acknowledgements per whole second of the window, median: robust to the burst that
        # ends a stall (a move's end is seen up to a second late, so that burst falls inside).
        per_second = [0] * max(1, int(end - start))
        for _, acked in inside:
            if int(acked - start) < len(per_second):
                per_second[int(acked - start)] += 1
        return {"seconds": round(end - start, 1), "messages": len(lat),
                "throughput_msgs_per_s": round(len(lat) / (end - start), 1),
                "median_msgs_per_s": statistics.median(per_second),
                "latency_p50_ms": round(statistics.median(lat) * 1000, 1),
                "latency_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1),
                "latency_max_ms": round(lat[-1] * 1000, 1), "longest_stall_ms": round(stall * 1000, 1)}


class LinkSampler:
    """Broker 1's bytes through its internal interface, once a second (the link the moves use)."""

    def __init__(self, cluster: ComposeCluster, iface: str) -> None:
        self.cluster, self.iface = cluster, iface
        self.points: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.points.append((time.monotonic(), sent_bytes(self.cluster, 1, self.iface)))
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            self.stop.wait(1.0)

    def between(self, start: float, end: float) -> int:
        """Bytes sent between the samples nearest `start` and `end`."""
        if len(self.points) < 2:
            return 0
        a = min(self.points, key=lambda p: abs(p[0] - start))
        b = min(self.points, key=lambda p: abs(p[0] - end))
        return b[1] - a[1]


def reassign(cluster: ComposeCluster, topic: str, throttle: int | None) -> None:
    plan = {"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": [1, 2, 3]}
                                          for p in range(MOVE_PARTITIONS)]}
    cluster.exec("zookeeper", "sh", "-c", f"echo '{json.dumps(plan)}' > /tmp/{topic}.json")
    cmd = ["minibroker", "reassign", "--zookeeper", "127.0.0.1:2181", "--execute",
           "--reassignment-json-file", f"/tmp/{topic}.json"]
    if throttle:
        cmd += ["--throttle", str(throttle)]
    cluster.exec("zookeeper", *cmd)


def moved(cluster: ComposeCluster, topic: str) -> bool:
    """--verify: true once every partition is on [1, 2, 3] (and it removes the throttle then)."""
    r = cluster.exec("zookeeper", "minibroker", "reassign", "--zookeeper", "127.0.0.1:2181", "--verify",
                     "--reassignment-json-file", f"/tmp/{topic}.json", check=False)
    return "in progress" not in r.stdout and "completed successfully" in r.stdout


def move(cluster: ComposeCluster, topic: str, throttle: int | None) -> tuple[float, float]:
    """Reassigns `topic` to [1, 2, 3]; (start, end) in monotonic seconds."""
    start = time.monotonic()
    reassign(cluster, topic, throttle)
    while not moved(cluster, topic):
        if time.monotonic() - start > MOVE_TIMEOUT_S:
            raise TimeoutError(f"moving {topic} took more than {MOVE_TIMEOUT_S:.0f} s")
        time.sleep(0.5)
    return start, time.monotonic()


def run(image: str, workdir: Path, rate_mbit: int, throttle: int, backlog: int, steady_rate: int,
        baseline_s: float, bounded: bool) -> dict:
    cluster = ComposeCluster(image, workdir, (OVERRIDE,), prefix=PREFIX)
    try:
        progress(f"starting the compose cluster ({cluster.project})")
        cluster.up()
        for topic in ("move_free", "move_throttled"):
            asyncio.run(create_topic(cluster.bootstrap, topic,
                                     assignment={p: [1, 2] for p in range(MOVE_PARTITIONS)}))
        asyncio.run(create_topic(cluster.bootstrap, "steady",
                                 assignment={p: [1, 2, 3] for p in range(STEADY_PARTITIONS)}))
        for topic in ("move_free", "move_throttled"):
            progress(f"producing a {backlog / MB:.0f} MB backlog to '{topic}'")
            # acks=all: broker 2 holds the backlog before the links are shaped, so only broker 3
            # copies anything during the moves.
            produce_bytes(cluster.bootstrap, topic, MOVE_PARTITIONS, backlog, acks="all")
        ifaces = {b: internal_interface(cluster, b) for b in (1, 2, 3)}
        if rate_mbit:
            shape(cluster, ifaces, rate_mbit)
        link = LinkSampler(cluster, ifaces[1])
        link.thread.start()
        client = SteadyClient(cluster.bootstrap, steady_rate, bounded)
        client.thread.start()
        time.sleep(5 + baseline_s)  # 5 s for the client to connect and settle, then the baseline
        t0 = time.monotonic()
        phases: list[dict] = [{"phase": "before", "start": t0 - baseline_s, "end": t0}]
        for label, topic, t in (("unthrottled", "move_free", None), ("throttled", "move_throttled", throttle)):
            progress(f"moving '{topic}' to [1, 2, 3], throttle {t or 'none'}")
            start, end = move(cluster, topic, t)
            progress(f"'{topic}' moved in {end - start:.1f} s")
            phases.append({"phase": label, "start": start, "end": end, "throttle_bytes_per_s": t})
            time.sleep(SETTLE_S)
        client.stop.set()
        client.thread.join(90)
        link.stop.set()
        link.thread.join(10)
        link_bytes_per_s = rate_mbit * MB / 8 if rate_mbit else None
        out = []
        for ph in phases:
            start, end = ph["start"], ph["end"]
            row: dict = {"phase": ph["phase"], "steady": client.window(start, end)}
            if ph["phase"] != "before":
                seconds = end - start
                wire = link.between(start, end)
                row |= {"throttle_bytes_per_s": ph["throttle_bytes_per_s"], "move_seconds": round(seconds, 1),
                        "catch_up_bytes_per_s": round(backlog / seconds),
                        "link_bytes_per_s": round(wire / seconds)}
                if link_bytes_per_s:
                    row |= {"catch_up_fraction_of_link": round(backlog / seconds / link_bytes_per_s, 3),
                            "link_busy_fraction": round(wire / seconds / link_bytes_per_s, 3)}
                if ph["throttle_bytes_per_s"]:
                    row["catch_up_fraction_of_throttle"] = round(backlog / seconds / ph["throttle_bytes_per_s"], 3)
            out.append(row)
        progress("; ".join(f"{r['phase']}: {r['steady']}" for r in out))
        return {"phases": out, "client_errors": client.errors,
                "timeline": {"t0": t0, "moves": [(round(p["start"] - t0, 2), round(p["end"] - t0, 2), p["phase"])
                                                 for p in phases[1:]],
                             "latency": [(round(a - t0, 3), round((a - s) * 1000, 1)) for s, a in client.samples],
                             "link": [(round(t - t0, 2), b) for t, b in link.points]}}
    finally:
        progress(f"removing {cluster.project} (containers, networks, volumes)")
        cluster.down()


def acks_per_second(latency: list[tuple[float, float]]) -> list[tuple[int, int]]:
    """(second from the first move's start, acknowledgements in it)."""
    per_s: dict[int, int] = {}
    for x, _ in latency:
        per_s[int(x // 1)] = per_s.get(int(x // 1), 0) + 1
    return sorted(per_s.items())


def plot(result: dict, rate_mbit: int, throttle: int, steady_rate: int) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tl = result["timeline"]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    colours = {"unthrottled": "tab:red", "throttled": "tab:green"}
    for ax in (ax1, ax2, ax3):
        for start, end, label in tl["moves"]:
            ax.axvspan(start, end, color=colours[label], alpha=0.12)
    xs = [x for x, _ in tl["latency"]]
    ax1.plot(xs, [y for _, y in tl["latency"]], ".", markersize=1.5, color="tab:blue")
    ax1.set_yscale("log")
    ax1.set_ylabel("acks=all latency (ms)")
    ax1.set_title(f"Steady client ({steady_rate} msg/s of 1 KB, acks=all) during two moves; links shaped to "
                  f"{rate_mbit or 'unshaped'} Mbit/s\nred: unthrottled move, green: throttled at "
                  f"{throttle / MB:g} MB/s")
    per_s = acks_per_second(tl["latency"])
    ax2.step([s for s, _ in per_s], [n for _, n in per_s], where="post", color="tab:blue")
    ax2.axhline(steady_rate, linestyle=":", color="grey", linewidth=0.8)
    ax2.set_ylabel("acknowledged msg/s")
    pts = tl["link"]
    rates = [((t1 + t2) / 2, (b2 - b1) / (t2 - t1) * 8 / 1e6) for (t1, b1), (t2, b2)
             in zip(pts, pts[1:], strict=False)
             if t2 > t1]
    ax3.plot([t for t, _ in rates], [r for _, r in rates], color="tab:purple")
    if rate_mbit:
        ax3.axhline(rate_mbit, linestyle=":", color="grey", linewidth=0.8)
        ax3.axhline(throttle * 8 / 1e6, linestyle="--", color="tab:green", linewidth=0.8)
    ax3.set_ylabel("broker 1 internal egress (Mbit/s)")
    ax3.set_xlabel("seconds from the start of the first move")
    return save_figure(fig, "nic")


def _cleanup_on_signal() -> None:
    """SIGTERM/SIGHUP raise SystemExit, so the `finally` that removes the cluster runs (Ctrl-C already does)."""
    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, leave)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-mbit", type=int, default=100, help="tbf rate of each broker's link (0: unshaped)")
    parser.add_argument("--throttle-fraction", type=float, default=0.2,
                        help="throttle T as a fraction of the link (ignored with --throttle-mb)")
    parser.add_argument("--throttle-mb", type=float, default=None, help="throttle T in MB/s")
    parser.add_argument("--backlog-mb", type=float, default=100.0, help="bytes moved by each move")
    parser.add_argument("--steady-rate", type=int, default=200, help="steady client's 1 KB messages/s")
    parser.add_argument("--baseline-s", type=float, default=10.0)
    parser.add_argument("--client", choices=("bounded", "unbounded"), default="bounded",
                        help="unbounded: linger 0 and no in-flight limit, the exploratory run's client (one "
                             "message per acks=all request, queued on the broker's connection)")
    parser.add_argument("--image", help="an image to run instead of building this tree's")
    parser.add_argument("--logs", type=Path, help="keep the containers' logs in this directory")
    args = parser.parse_args()
    why = docker_available()
    if why:
        raise SystemExit(f"bench.nic needs Docker: {why}")
    _cleanup_on_signal()
    left = sweep_leftovers(PREFIX)
    if left:
        progress(f"removed what earlier runs left: {', '.join(left)}")
    # A tag of our own: docker/build-images.sh run by anyone else removes every other minibroker:*
    # tag, and Compose would then find no image to start.
    image = f"minibroker-nic:run{os.getpid()}"
    subprocess.run(["docker", "tag", args.image or build_image(), image], check=True)
    if args.throttle_mb is not None:
        throttle = int(args.throttle_mb * MB)
    else:
        throttle = int(args.throttle_fraction * (args.rate_mbit or 1000) * MB / 8)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="minibroker-nic-") as tmp:
            workdir = args.logs or Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            result = run(image, workdir, args.rate_mbit, throttle, int(args.backlog_mb * MB), args.steady_rate,
                         args.baseline_s, args.client == "bounded")
    finally:
        subprocess.run(["docker", "rmi", image], capture_output=True)  # the tag only, while minibroker:* holds it
    path = plot(result, args.rate_mbit, throttle, args.steady_rate)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    write_json("nic", {"machine": machine(), "load_average_after": [float(x) for x in load], "client": args.client,
                       "link_mbit_per_s": args.rate_mbit or None, "throttle_bytes_per_s": throttle,
                       "backlog_bytes_per_move": int(args.backlog_mb * MB), "steady_rate_msgs_per_s": args.steady_rate,
                       "bench_seconds": round(time.monotonic() - started), "client_errors": result["client_errors"],
                       "phases": result["phases"], "moves": result["timeline"]["moves"],
                       "acks_per_second": acks_per_second(result["timeline"]["latency"]),
                       "plot": str(path.relative_to(ROOT))})


if __name__ == "__main__":
    main()
