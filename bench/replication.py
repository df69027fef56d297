"""Follower catch-up throughput over a backlog, next to a raw loopback socket pump in the same run.

Two brokers; a topic of 8 partitions whose replicas are [0, 1]. Broker 1 is stopped, a
backlog of 1 KiB messages (1 GiB by default) is produced to broker 0, then broker 1 starts
and its replica fetcher (Fetch v3, replica.fetch.response.max.bytes) pulls everything. The
rate is taken from broker 1's log growth, sampled every 250 ms.

    .venv/bin/python -m bench.replication [--backlog-mb 1024]

Writes bench/out/replication.json and bench/out/replication.png.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.common import OUT, cluster, machine, progress, save_figure, write_json
from bench.produce_consume import socket_pump
from tests.support.replication import log_bytes
from tests.support.topics import create_topic
from tests.support.traffic import produce_bytes

MB = 1_000_000
PARTITIONS = 8


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backlog-mb", type=int, default=1024)
    # Catch-up settings an operator would use for a bulk copy; Kafka's defaults are 1 MiB and 10 MiB.
    ap.add_argument("--fetch-max-bytes", type=int, default=4 * 1024 * 1024, help="replica.fetch.max.bytes")
    ap.add_argument("--response-max-bytes", type=int, default=32 * 1024 * 1024,
                    help="replica.fetch.response.max.bytes")
    args = ap.parse_args()
    total = args.backlog_mb * 1024 * 1024
    with cluster(2, **{"replica.fetch.max.bytes": str(args.fetch_max_bytes),
                       "replica.fetch.response.max.bytes": str(args.response_max_bytes)}) as (b0, b1):
        asyncio.run(create_topic(b0, "backlog", assignment={p: [0, 1] for p in range(PARTITIONS)}))
        time.sleep(1)
        b1.stop()
        progress(f"producing a {args.backlog_mb} MiB backlog to broker 0")
        produce_bytes(b0.bootstrap, "backlog", PARTITIONS, total, 1024, flush_timeout=300,
                      on_progress=lambda n: progress(f"  produced {n / MB:,.0f} MB"),
                      **{"linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_000_000})
        target = log_bytes(b0, "backlog")
        progress(f"starting broker 1 to catch up {target / MB:,.0f} MB")
        b1.start(wait=False)
        samples = [(time.monotonic(), log_bytes(b1, "backlog"))]
        while samples[-1][1] < target:
            # Finely until the first byte lands (the move starts inside broker start-up), then 4 Hz.
            time.sleep(0.02 if samples[-1][1] == samples[0][1] else 0.25)
            samples.append((time.monotonic(), log_bytes(b1, "backlog")))
            if len(samples) % 20 == 0:
                progress(f"  follower at {samples[-1][1] / MB:,.0f} of {target / MB:,.0f} MB")
    start = next(i for i, (_, b) in enumerate(samples) if b > 0) - 1
    t0, _ = samples[start]
    t1, _ = samples[-1]
    rate = target / (t1 - t0) / MB
    progress("raw loopback pump of the same bytes")
    pump = target / socket_pump(target) / MB
    data = {"bench": "replication", "machine": machine(), "backlog_bytes": target, "message_bytes": 1024,
            "partitions": PARTITIONS, "replica_fetch_max_bytes": args.fetch_max_bytes,
            "replica_fetch_response_max_bytes": args.response_max_bytes, "catch_up_seconds": round(t1 - t0, 2), "catch_up_mb_per_s": round(rate, 1),
            "raw_socket_pump_mb_per_s": round(pump, 1), "ratio_to_pump": round(rate / pump, 3),
            "samples": [(round(t - t0, 2), b) for t, b in samples[start:]]}
    write_json("replication", {k: v for k, v in data.items() if k != "samples"} | {"samples_count": len(samples)})
    (OUT / "replication_samples.json").write_text(str(data["samples"]))
    plot(data)


def plot(data: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [t for t, _ in data["samples"]]
    ys = [b / MB for _, b in data["samples"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, ys, label="follower log size")
    ax.set_xlabel("seconds since the follower started")
    ax.set_ylabel("MB replicated")
    ax.set_title(f"catch-up {data['catch_up_mb_per_s']} MB/s "
                 f"(raw socket pump {data['raw_socket_pump_mb_per_s']} MB/s)")
    ax.legend()
    save_figure(fig, "replication")


if __name__ == "__main__":
    main()
