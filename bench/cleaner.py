"""The log cleaner: cleaning throughput, and produce latency while it runs, unthrottled and throttled.

One broker. A topic is filled with `--dirty-mb` of updates over `--keys` keys (1 KiB values) while
its cleanup.policy is `delete`; then a producer sends at a fixed rate (acks=1, one in flight per
poll) and its per-message latency (produce() to delivery) is measured for `--baseline-s` with no
cleaning, then the topic is switched to `compact` through `minibroker configs` (applied live) and
the latency is measured until the cleaner's pass ends. Done twice: with
log.cleaner.io.max.bytes.per.second unset (Kafka's default: unlimited) and with `--throttle-mb`.
Throughput is the pass's dirty bytes over its seconds, as the broker logs them (`cleaner.cleaned`).
The reference, measured in the same run: a file pump that reads `--dirty-mb` from one file and
writes it to another in 64 KiB chunks (page cache, as the cleaner's I/O is), so the cleaner's
I/O rate is also given as a fraction of what plain reads and writes reach on this machine.

    .venv/bin/python -m bench.cleaner [--dirty-mb 40] [--throttle-mb 4]

Writes bench/out/cleaner.json and bench/out/cleaner.png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import tempfile
import time

from confluent_kafka import Producer

from bench.common import cluster, machine, progress, save_figure, write_json
from tests.support.brokers import BrokerProcess
from tests.support.tools import configs
from tests.support.topics import create_topic

VALUE = 1024
TOPIC = "table"


def fill(bootstrap: str, mb: int, keys: int) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20})
    rng = random.Random(1)
    n = mb * 1_000_000 // VALUE
    value = b"v" * VALUE
    for _ in range(n):
        while True:
            try:
                p.produce(TOPIC, key=b"key-%06d" % rng.randrange(keys), value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(300)
    return n


def latencies(bootstrap: str, seconds: float, rate: int, stop_when: object = None) -> list[float]:
    """Per-message latency (ms) of a producer sending `rate` msg/s for `seconds` (or until stop_when())."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    out: list[float] = []

    def delivered(sent: float):  # noqa: ANN202
        def cb(err, msg) -> None:  # noqa: ANN001
            if err is None:
                out.append((time.perf_counter() - sent) * 1000)
        return cb

    start = time.perf_counter()
    i = 0
    while True:
        now = time.perf_counter()
        if now - start >= seconds or (callable(stop_when) and i % 200 == 0 and stop_when()):
            break
        due = start + i / rate
        if due > now:
            time.sleep(due - now)
        p.produce(TOPIC, key=b"probe-%d" % (i % 100), value=b"p" * 100, partition=0,
                  on_delivery=delivered(time.perf_counter()))
        p.poll(0)
        i += 1
    p.flush(60)
    return out


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * 0.99))] if s else float("nan")


def file_pump(total_bytes: int, chunk: int = 1 << 16) -> float:
    """Bytes per second read plus written by copying `total_bytes` between two files, chunk by chunk."""
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "src"), os.path.join(d, "dst")
        with open(src, "wb") as f:
            f.write(os.urandom(total_bytes))
        started = time.perf_counter()
        fi, fo = os.open(src, os.O_RDONLY), os.open(dst, os.O_WRONLY | os.O_CREAT)
        try:
            while block := os.read(fi, chunk):
                os.write(fo, block)
        finally:
            os.close(fi)
            os.close(fo)
        return 2 * total_bytes / (time.perf_counter() - started)


def pass_figures(broker: BrokerProcess) -> dict[str, float] | None:
    for line in broker.log().splitlines():
        if "cleaner.cleaned" in line and TOPIC in line:
            fields = dict(re.findall(r"(\w+)=([\w.'-]+)", line))
            if int(fields.get("groups", "0")) > 0:
                return {k: float(fields[k]) for k in ("dirty_bytes", "bytes_read", "bytes_written", "seconds")}
    return None


def run(dirty_mb: int, keys: int, rate: int, baseline_s: float, throttle: int | None) -> dict[str, object]:
    overrides = {"log.cleaner.backoff.ms": "200"}
    if throttle is not None:
        overrides["log.cleaner.io.max.bytes.per.second"] = str(throttle)
    with cluster(1, **overrides) as [broker]:
        zk = broker.zk_connect
        asyncio.run(create_topic(broker, TOPIC, 1, 1, configs={"segment.bytes": "1048576",
                                                               "cleanup.policy": "delete"}))
        progress(f"filling {dirty_mb} MB")
        fill(broker.bootstrap, dirty_mb, keys)
        progress("baseline latency")
        base = latencies(broker.bootstrap, baseline_s, rate)
        r = configs(zk, "--entity-type", "topics", "--entity-name", TOPIC, "--alter", "--add-config",
                    "cleanup.policy=compact,min.cleanable.dirty.ratio=0.1")
        assert r.returncode == 0, r.stderr
        progress("latency while cleaning")
        started = time.perf_counter()
        during = latencies(broker.bootstrap, 900, rate, stop_when=lambda: pass_figures(broker) is not None)
        figures = pass_figures(broker)
        if figures is None:
            raise RuntimeError("the cleaner did not finish a pass")
        return {"throttle_bytes_per_second": throttle, "dirty_mb": dirty_mb,
                "clean_mb_per_s": figures["dirty_bytes"] / figures["seconds"] / 1e6,
                "cleaner_io_mb_per_s": (figures["bytes_read"] + figures["bytes_written"]) / figures["seconds"] / 1e6,
                "pass_seconds": figures["seconds"], "wall_seconds": time.perf_counter() - started,
                "baseline_p99_ms": p99(base), "cleaning_p99_ms": p99(during),
                "baseline_messages": len(base), "cleaning_messages": len(during)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dirty-mb", type=int, default=40)
    ap.add_argument("--keys", type=int, default=5000)
    ap.add_argument("--rate", type=int, default=500, help="latency probe messages per second")
    ap.add_argument("--baseline-s", type=float, default=15)
    ap.add_argument("--throttle-mb", type=float, default=4)
    args = ap.parse_args()
    runs = [run(args.dirty_mb, args.keys, args.rate, args.baseline_s, None),
            run(args.dirty_mb, args.keys, args.rate, args.baseline_s, int(args.throttle_mb * 1e6))]
    pump = file_pump(args.dirty_mb * 1_000_000)
    for r in runs:
        r["cleaner_io_of_file_pump"] = float(r["cleaner_io_mb_per_s"]) * 1e6 / pump  # type: ignore[arg-type]
    write_json("cleaner", {"machine": machine(), "file_pump_mb_per_s": pump / 1e6, "runs": runs})
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    labels = ["unthrottled", f"{args.throttle_mb:g} MB/s"]
    a.bar(labels, [r["clean_mb_per_s"] for r in runs])
    a.set_ylabel("dirty log cleaned, MB/s")
    a.set_title("cleaning throughput")
    x = range(len(runs))
    b.bar([i - 0.2 for i in x], [r["baseline_p99_ms"] for r in runs], 0.4, label="no cleaning")
    b.bar([i + 0.2 for i in x], [r["cleaning_p99_ms"] for r in runs], 0.4, label="while cleaning")
    b.set_xticks(list(x), labels)
    b.set_ylabel("produce latency p99, ms")
    b.legend()
    save_figure(fig, "cleaner")


if __name__ == "__main__":
    main()
