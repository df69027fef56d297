"""KIP-13 accuracy: clients pushing 3x their byte-rate quota, side by side on one broker.

Two confluent-kafka producers (quotas 0.5 and 1 MB/s, each offering 3x) and one consumer
(quota 1 MB/s, reading a topic filled beforehand) run for 50 s under quotas set with
`minibroker configs --entity-type clients`. Every second the bench samples what each
client really moved (producers: their topic's log growth; consumer: the messages received,
with their 34 bytes of framing) and the broker's `client_byte_rate` gauge (Kafka's Rate over
the 11 s quota window).

    .venv/bin/python -m bench.client_quota

Writes bench/out/client_quota.json and bench/out/client_quota.png. Target: within ±5% of
the quota averaged over 30 s. The bench reports the lowest and highest mean over every 30 s
span that starts after the first SETTLE_S seconds (connection set-up, the first full pacing
bucket), one span per second, and the mean over the whole run from there.
"""

from __future__ import annotations

import asyncio
import threading
import time

from bench.common import cluster, machine, progress, save_figure, write_json
from tests.support.metrics import samples, scrape
from tests.support.replication import log_bytes
from tests.support.tools import configs
from tests.support.topics import create_topic
from tests.support.traffic import consume_for, paced_producer, produce_bytes

MB = 1_000_000
RUN_S = 50
SETTLE_S = 3
SPAN_S = 30
FRAMING = 34  # offset 8, size 4, crc 4, magic 1, attributes 1, timestamp 8, key and value lengths 8
PRODUCERS = {"bench-p1": 500_000, "bench-p2": 1 * MB}
CONSUMER = ("bench-c1", 1 * MB)


def _per_second(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The cumulative series thinned to about one point per second."""
    out: list[tuple[float, float]] = []
    for t, v in pts:
        if not out or t - out[-1][0] >= 1.0:
            out.append((round(t, 2), round(v)))
    return out


def broker_rates(url: str) -> dict[str, float]:
    """The broker's client_byte_rate gauge by client id."""
    return {labels["client_id"]: value for labels, value in samples(scrape(url), "client_byte_rate")
            if "client_id" in labels}


def mean(series: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Rate between two times of a cumulative (t, bytes) series."""
    a = max((p for p in series if p[0] <= t0), default=series[0])
    z = max((p for p in series if p[0] <= t1), default=series[-1])
    return (z[1] - a[1]) / (z[0] - a[0])


def span_ratios(series: list[tuple[float, float]], quota: float) -> list[float]:
    """Mean rate / quota over [t, t + SPAN_S] for t = SETTLE_S, SETTLE_S + 1, ... while it fits."""
    end = series[-1][0]
    out, t = [], float(SETTLE_S)
    while t + SPAN_S <= end:
        out.append(mean(series, t, t + SPAN_S) / quota)
        t += 1
    return out


async def run() -> dict:
    with cluster(1, **{"num.partitions": "1"}) as (b,):
        zk = b.zk_connect
        for cid, q in PRODUCERS.items():
            await create_topic(b, cid, 1)
            assert configs(zk, "--entity-type", "clients", "--entity-name", cid, "--alter", "--add-config",
                           f"producer_byte_rate={q}").returncode == 0
        await create_topic(b, "bench-data", 1)
        total_fill = int(CONSUMER[1] * (RUN_S + 15))
        progress(f"filling bench-data with {total_fill / MB:.0f} MB for the consumer")
        await asyncio.to_thread(produce_bytes, b.bootstrap, "bench-data", 1, total_fill)
        assert configs(zk, "--entity-type", "clients", "--entity-name", CONSUMER[0], "--alter", "--add-config",
                       f"consumer_byte_rate={CONSUMER[1]}").returncode == 0
        stop = threading.Event()
        marks: list[tuple[float, int]] = []
        start = time.monotonic()
        jobs = [asyncio.to_thread(paced_producer, b.bootstrap, cid, cid, 3 * q, RUN_S, stop)
                for cid, q in PRODUCERS.items()]
        jobs.append(asyncio.to_thread(consume_for, b.bootstrap, CONSUMER[0], "bench-data", RUN_S, marks))
        tasks = [asyncio.ensure_future(j) for j in jobs]
        logs: dict[str, list[tuple[float, float]]] = {cid: [] for cid in PRODUCERS}
        gauges: dict[str, list[tuple[float, float]]] = {cid: [] for cid in [*PRODUCERS, CONSUMER[0]]}
        base = {cid: log_bytes(b, cid) for cid in PRODUCERS}
        while time.monotonic() - start < RUN_S:
            t = time.monotonic() - start
            for cid in PRODUCERS:
                logs[cid].append((t, log_bytes(b, cid) - base[cid]))
            rates = await asyncio.to_thread(broker_rates, b.metrics_url)
            for cid in gauges:
                gauges[cid].append((t, rates.get(cid, 0.0)))
            progress(f"t={t:4.1f}s " + " ".join(f"{cid}={rates.get(cid, 0) / MB:.2f}MB/s" for cid in gauges))
            await asyncio.sleep(1)
        stop.set()
        await asyncio.gather(*tasks)
    # The consumer's offset stamps are relative to its own start, a few ms after `start`. It
    # counts message values; the quota counts the stored messages (FRAMING each, magic 1)
    # plus response headers and a cut-off last message per fetch, so this is a lower bound.
    series = {**logs, CONSUMER[0]: [(t, n * (1000 + FRAMING) / 1000) for t, n in marks]}
    quotas = {**PRODUCERS, CONSUMER[0]: CONSUMER[1]}
    clients = {}
    for cid, pts in series.items():
        q = quotas[cid]
        spans = span_ratios(pts, q)
        clients[cid] = {
            "type": "fetch" if cid == CONSUMER[0] else "produce",
            "quota": q,
            "offered": "reads as fast as allowed" if cid == CONSUMER[0] else 3 * q,
            "first_s_ratio": round(mean(pts, 0, SETTLE_S) / q, 3),
            "spans_30s": len(spans),
            "min_30s_ratio": round(min(spans), 3),
            "max_30s_ratio": round(max(spans), 3),
            "mean_ratio": round(mean(pts, SETTLE_S, pts[-1][0]) / q, 3),
            "cumulative_bytes": _per_second(pts),
            "broker_rate": [(round(t, 1), round(v)) for t, v in gauges[cid]],
        }
    return clients


def plot(clients: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(clients), 1, figsize=(8, 2.6 * len(clients)), squeeze=False)
    for ax, (cid, c) in zip(axes[:, 0], clients.items(), strict=True):
        pts = c["cumulative_bytes"]
        xs = [(a[0] + b[0]) / 2 for a, b in zip(pts, pts[1:], strict=False)]
        ys = [(b[1] - a[1]) / (b[0] - a[0]) / MB for a, b in zip(pts, pts[1:], strict=False) if b[0] > a[0]]
        ax.plot(xs[:len(ys)], ys, label="client rate, per second", lw=1)
        ax.plot([t for t, _ in c["broker_rate"]], [v / MB for _, v in c["broker_rate"]],
                label="broker's Rate (11 s window)", lw=1.5)
        ax.axhline(c["quota"] / MB, color="k", ls="--", lw=1, label="quota")
        ax.set_title(f"{cid} ({c['type']}): every 30 s span {c['min_30s_ratio']:.3f}"
                     f"-{c['max_30s_ratio']:.3f} x quota", fontsize=9)
        ax.set_ylabel("MB/s")
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("seconds")
    save_figure(fig, "client_quota", dpi=110)


def main() -> None:
    clients = asyncio.run(run())
    write_json("client_quota", {"bench": "client_quota", "machine": machine(), "run_seconds": RUN_S,
                                "settle_s": SETTLE_S, "span_s": SPAN_S, "clients": clients})
    plot(clients)


if __name__ == "__main__":
    main()
