"""Produce and consume throughput of one broker, next to a raw loopback socket pump in the same run.

The confluent-kafka producer and consumer (librdkafka) drive the broker: 100-byte values, acks=1,
topics of 1 and 8 partitions. The confluent-kafka consumer is bounded by its own Python
per-message cost, so the same data is also read with kcat (librdkafka in C), which shows what
the broker itself serves. The pump moves the same number of bytes through a loopback TCP
socket with plain send/recv, which is the ceiling any broker on this machine works under.

    .venv/bin/python -m bench.produce_consume [--messages 1000000]

Writes bench/out/produce_consume.json and bench/out/produce_consume.png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.common import cluster, machine, progress, save_figure, write_json
from tests.support.topics import create_topic
from tests.support.traffic import produce_one

VALUE_SIZE = 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def socket_pump(total_bytes: int, chunk: int = 1 << 16) -> float:
    """Seconds to push total_bytes through a loopback TCP connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = 0

    def sink() -> None:
        nonlocal got
        conn, _ = srv.accept()
        with conn:
            while True:
                data = conn.recv(1 << 20)
                if not data:
                    return
                got += len(data)

    t = threading.Thread(target=sink)
    t.start()
    buf = b"\0" * chunk
    start = time.perf_counter()
    with socket.create_connection(srv.getsockname()) as c:
        left = total_bytes
        while left > 0:
            c.sendall(buf[: min(chunk, left)])
            left -= chunk
    t.join()
    elapsed = time.perf_counter() - start
    srv.close()
    assert got >= total_bytes
    return elapsed


def produce(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False,
                  "message.max.bytes": 1_000_000})
    value = b"v" * VALUE_SIZE
    errors = 0

    def cb(err, _msg) -> None:  # noqa: ANN001
        nonlocal errors
        if err is not None:
            errors += 1

    start = time.perf_counter()
    for i in range(n):
        produce_one(p, topic, value, 0.01, partition=i % partitions, on_delivery=cb)
        if i % 100_000 == 0 and i:
            progress(f"  produced {i:,}")
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{left} undelivered, {errors} failed")
    return elapsed


def consume(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    # librdkafka's prefetch queue defaults (100k messages / 64 MB) starve a fast consumer
    # loop; with room for a million messages the fetch thread keeps ahead of Python.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-assign-only", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 8 * 1024 * 1024,
                  "queued.min.messages": 1_000_000, "queued.max.messages.kbytes": 2_097_151})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    while got < n:
        msgs = c.consume(100_000, 10)
        if not msgs:
            raise RuntimeError(f"consumer stalled at {got}")
        got += len(msgs)
        if msgs[-1].error():
            raise RuntimeError(str(msgs[-1].error()))
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def consume_kcat(bootstrap: str, topic: str, n: int) -> float:
    """librdkafka without Python's per-message cost: what the broker itself can serve."""
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                          "-X", "fetch.max.bytes=52428800", "-X", "max.partition.fetch.bytes=4194304",
                          "-f", "%o\n"], capture_output=True, check=True, timeout=600)
    elapsed = time.perf_counter() - start
    got = out.stdout.count(b"\n")
    if got != n:
        raise RuntimeError(f"kcat read {got} of {n}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.messages
    results = []
    with cluster(1) as [broker]:
        for partitions in (1, 8):
            topic = f"bench-{partitions}"
            asyncio.run(create_topic(broker, topic, partitions))
            # The client may be what limits msg/s; the broker's own CPU time per message is what
            # the broker costs, whichever side is the bottleneck.
            assert broker.proc is not None
            pid = broker.proc.pid
            progress(f"producing {n:,} x {VALUE_SIZE} B to {partitions} partition(s)")
            c0 = cpu_seconds(pid)
            tp = produce(broker.bootstrap, topic, partitions, n)
            c1 = cpu_seconds(pid)
            progress(f"consuming {n:,} from {partitions} partition(s)")
            tc = consume(broker.bootstrap, topic, partitions, n)
            c2 = cpu_seconds(pid)
            progress(f"consuming {n:,} from {partitions} partition(s) with kcat")
            tk = consume_kcat(broker.bootstrap, topic, n)
            c3 = cpu_seconds(pid)
            for kind, secs, cpu in (("produce", tp, c1 - c0), ("consume", tc, c2 - c1), ("consume (kcat)", tk, c3 - c2)):
                results.append({"partitions": partitions, "kind": kind, "messages": n, "seconds": round(secs, 3),
                                "msgs_per_s": round(n / secs), "mb_per_s": round(n * VALUE_SIZE / secs / 1e6, 1),
                                "broker_cpu_us_per_msg": round(cpu / n * 1e6, 2)})
    total = n * VALUE_SIZE
    progress(f"raw loopback pump of {total / 1e6:.0f} MB")
    pump = socket_pump(total)
    pump_mb_s = total / pump / 1e6
    for r in results:
        r["fraction_of_pump"] = round(r["mb_per_s"] / pump_mb_s, 3)
    data = {"bench": "produce_consume", "machine": machine(), "value_bytes": VALUE_SIZE,
            "raw_socket_pump_mb_per_s": round(pump_mb_s, 1), "results": results}
    write_json("produce_consume", data)
    plot(data)


def plot(data: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{r['kind']}\n{r['partitions']} part." for r in data["results"]]
    values = [r["mb_per_s"] for r in data["results"]]
    ax.bar(labels + ["raw socket\npump"], values + [data["raw_socket_pump_mb_per_s"]],
           color=["tab:blue"] * len(values) + ["tab:gray"])
    ax.set_ylabel("MB/s (100-byte values)")
    ax.set_yscale("log")
    ax.set_title("minibroker, one broker, confluent-kafka, acks=1")
    save_figure(fig, "produce_consume")


if __name__ == "__main__":
    main()
