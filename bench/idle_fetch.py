"""Broker CPU of an idle long-poll consumer on many partitions while another topic is busy.

One broker. A confluent-kafka consumer is assigned every partition of an idle topic (1,000 by
default) and long-polls them (librdkafka's default fetch.wait.max.ms, 500 ms); a producer sends
a steady 1,000 msg/s of 100-byte values into another topic. The broker's CPU time (/proc) is
read over the same window with the producer alone and with the idle consumer too: the
difference is what the idle consumer costs. When every append wakes every waiting fetch, that
fetch re-reads all its partitions on each append; keyed by partition, an append elsewhere
costs it nothing and it only answers at its max wait.

Reference, in the same run: the same producer into the same broker with no consumer at all.

    .venv/bin/python -m bench.idle_fetch [--partitions 1000] [--seconds 15] [--before main]

Writes bench/out/idle_fetch.json and bench/out/idle_fetch.png.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from bench.common import cluster, load_average, machine, progress, save_figure, write_json
from bench.latency import trees
from bench.produce_consume import cpu_seconds
from tests.support.topics import create_topic

VALUE_SIZE = 100


class IdleConsumer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-assign-only",
                           "enable.auto.commit": False})
        self.c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
        self.stop = threading.Event()
        self.received = 0

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.c.poll(0.1)
            if msg is not None and not msg.error():
                self.received += 1
        self.c.close()


def steady(bootstrap: str, topic: str, rate: int, seconds: float) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "enable.idempotence": False})
    value = b"b" * VALUE_SIZE
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        left = start + i / rate - time.perf_counter()
        if left > 0:
            # Sleep, not poll: confluent-kafka truncates a poll's timeout to whole milliseconds,
            # so polling the sub-millisecond tail spun a core the broker shares on this machine.
            time.sleep(left)
        p.produce(topic, value, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    return n


def measure(source: Path | None, partitions: int, rate: int, seconds: float) -> dict[str, Any]:
    with cluster(1, source=source) as [broker]:
        progress(f"  creating {partitions} idle partitions")
        asyncio.run(create_topic(broker, "idle", partitions, timeout=300))
        asyncio.run(create_topic(broker, "busy", 1))
        assert broker.proc is not None
        pid = broker.proc.pid
        out: dict[str, Any] = {"tree": "this" if source is None else "before", "partitions": partitions}
        for label, with_consumer in (("producer only", False), ("producer + idle consumer", True)):
            consumer = None
            if with_consumer:
                consumer = IdleConsumer(broker.bootstrap, "idle", partitions)
                consumer.start()
                time.sleep(5)  # assigned, positioned and long-polling
            c0, t0 = cpu_seconds(pid), time.perf_counter()
            steady(broker.bootstrap, "busy", rate, seconds)
            cores = (cpu_seconds(pid) - c0) / (time.perf_counter() - t0)
            if consumer is not None:
                consumer.stop.set()
                consumer.join(10)
                assert consumer.received == 0
            out[label] = round(cores, 3)
            progress(f"  {label}: {cores:.3f} cores")
        out["idle_consumer_cores"] = round(out["producer + idle consumer"] - out["producer only"], 3)
        out["load_average_after"] = load_average()
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--before", help="git ref to run against too, first (e.g. main)")
    args = ap.parse_args()
    load_before = load_average()
    results = []
    with trees(args.before) as sources:
        for label, source in sources:
            progress(f"{label}: {args.partitions} idle partitions, {args.rate} msg/s elsewhere")
            results.append(measure(source, args.partitions, args.rate, args.seconds))
    data = {"bench": "idle_fetch", "machine": machine(), "load_average_before": load_before,
            "load_average_after": load_average(), "before_ref": args.before, "rate": args.rate,
            "seconds": args.seconds, "results": results}
    write_json("idle_fetch", data)
    plot(data)


def plot(data: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    labels, alone, both = [], [], []
    for r in data["results"]:
        labels.append(r["tree"])
        alone.append(r["producer only"])
        both.append(r["producer + idle consumer"])
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], alone, 0.4, label="producer only (reference)")
    ax.bar([x + 0.2 for x in xs], both, 0.4, label=f"+ idle consumer on {data['results'][0]['partitions']} partitions")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("broker CPU, cores")
    ax.set_title(f"{data['rate']} msg/s into another topic (load {data['load_average_before'][0]} before)")
    ax.legend(fontsize=8)
    save_figure(fig, "idle_fetch")



if __name__ == "__main__":
    main()
