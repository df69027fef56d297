"""KIP-73 accuracy: a bootstrapping broker catching up under replication throttle T.

Three brokers; a topic of 20 partitions with replicas [p % 2, 2]. Broker 2 is stopped, a
backlog worth about 25 s at T is produced, the throttle is set with `minibroker configs`
(replica lists `*` on the topic, rate T on `brokers/<default>`), and broker 2 restarts.
Every second the bench reads broker 2's log growth and the brokers' own
`*_replication_throttled_rate` gauges. Runs: T = 1, 5 and 20 MB/s, and one where T changes
mid-move from 4 to 12 MB/s.

    .venv/bin/python -m bench.throttle [--runs 1,5,20,change]

Writes bench/out/throttle.json and bench/out/throttle.png. Targets: the mean over the move
within 3% of T, and no 5-second window above 1.05 T after the first window.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.common import cluster, machine, progress, save_figure, write_json
from tests.support.metrics import metric
from tests.support.replication import log_bytes, set_throttle_rate, throttle_all_replicas
from tests.support.topics import create_topic
from tests.support.traffic import produce_bytes

MB = 1_000_000
PARTITIONS = 20


def gauge(url: str, name: str) -> float:
    """The metric's value, summed over its label sets (0 while the broker is not listening or has none)."""
    try:
        return metric(url, name)
    except (OSError, KeyError):
        return 0.0


def run(label: str, rate: int, change_to: int | None = None, change_after: float = 10.0) -> dict:
    backlog = int(rate * 25) if change_to is None else int(rate * change_after + change_to * 15)
    with cluster(3) as brokers:
        b0, _, b2 = brokers
        zk = b0.zk_connect
        asyncio.run(create_topic(b0, "thr", assignment={p: [p % 2, 2] for p in range(PARTITIONS)}))
        time.sleep(1.5)
        b2.stop()
        progress(f"[{label}] producing a {backlog / MB:,.0f} MB backlog")
        produce_bytes(",".join(b.bootstrap for b in brokers[:2]), "thr", PARTITIONS, backlog)
        target = log_bytes(brokers[0], "thr") + log_bytes(brokers[1], "thr")
        throttle_all_replicas(zk, "thr")
        set_throttle_rate(zk, rate)
        time.sleep(1)
        progress(f"[{label}] broker 2 catches up {target / MB:,.0f} MB at T = {rate / MB} MB/s")
        # Not waiting for registration: the first fetches follow it within milliseconds and
        # may take a second of T at once, which belongs in the move.
        last = start_bytes = log_bytes(b2, "thr")
        b2.start(wait=False)
        t0 = time.monotonic()
        seconds: list[dict] = []
        first_byte_at = done_at = None
        changed = change_to is None
        while last < target and time.monotonic() - t0 < 600:
            # Poll finely between the per-second samples, to time the move's first and last byte.
            while (time.monotonic() - t0) % 1.0 < 0.95:
                size = log_bytes(b2, "thr")
                if first_byte_at is None and size > start_bytes:
                    first_byte_at = time.monotonic()
                if size >= target:
                    done_at = done_at or time.monotonic()
                time.sleep(0.05)
            time.sleep(1.0 - ((time.monotonic() - t0) % 1.0))
            now = log_bytes(b2, "thr")
            done_at = done_at or (time.monotonic() if now >= target else None)
            t = round(time.monotonic() - t0)
            quota = rate if not changed or change_to is None else change_to
            seconds.append({"t": t, "quota": quota, "disk_rate": now - last,
                            "follower_gauge": gauge(b2.metrics_url, "follower_replication_throttled_rate"),
                            "bytes_in_gauge": gauge(b2.metrics_url, "partition_bytes_in_rate"),
                            "leader_gauge": sum(gauge(b.metrics_url, "leader_replication_throttled_rate")
                                                for b in brokers[:2])})
            last = now
            if not changed and t >= change_after:
                set_throttle_rate(zk, change_to)
                changed = True
                progress(f"[{label}] T changed to {change_to / MB} MB/s")
    # The mean over the move: the bytes moved over the time from the first byte to the last
    # (timed to 50 ms). The throttle lets the first fetches take up to a second of T at once and
    # then holds back, so the move's first second belongs in the mean. Reported beside it, as
    # before: the mean of the whole seconds strictly inside the move (which leaves that first
    # burst out). For the changed run, the seconds from 2 s after the change.
    whole = None
    if change_to is None and first_byte_at is not None and done_at is not None and done_at > first_byte_at:
        whole = (target - start_bytes) / (done_at - first_byte_at)
    growing = [i for i, s in enumerate(seconds) if s["disk_rate"] > 0]
    phase = seconds[growing[0] + 1:growing[-1]] if len(growing) > 2 else seconds
    if change_to is not None:
        phase = [s for s in phase if s["t"] > change_after + 2]
    final_t = phase[0]["quota"] if phase else rate
    mean = sum(s["disk_rate"] for s in phase) / max(len(phase), 1)
    windows = [sum(s["disk_rate"] for s in phase[i:i + 5]) / 5 for i in range(1, len(phase) - 4)]
    return {"label": label, "T": rate, "changed_to": change_to, "backlog_bytes": target,
            "move_seconds": round(done_at - first_byte_at, 2) if whole else None,
            "whole_move_mean_over_T": round(whole / rate, 4) if whole else None,
            "mean_rate_final_phase": round(mean), "mean_over_T": round(mean / final_t, 4),
            "max_5s_window_over_T": round(max(windows) / final_t, 4) if windows else None,
            "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="1,5,20,change")
    args = ap.parse_args()
    results = []
    for r in args.runs.split(","):
        if r == "change":
            results.append(run("4 -> 12 MB/s", 4 * MB, 12 * MB))
        else:
            results.append(run(f"{r} MB/s", int(float(r) * MB)))
        res = results[-1]
        progress(f"  whole-move mean {res['whole_move_mean_over_T']} T, inner seconds {res['mean_over_T']:.3f} T, "
                 f"worst 5 s window {res['max_5s_window_over_T']} T")
    write_json("throttle", {"bench": "throttle", "machine": machine(), "runs": results})
    plot(results)


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(8, 2.6 * len(results)), squeeze=False)
    for ax, r in zip(axes[:, 0], results, strict=True):
        ts = [s["t"] for s in r["seconds"]]
        ax.plot(ts, [s["disk_rate"] / MB for s in r["seconds"]], label="follower log growth")
        ax.plot(ts, [s["follower_gauge"] / MB for s in r["seconds"]], label="follower throttled rate (gauge)")
        ax.plot(ts, [s["leader_gauge"] / MB for s in r["seconds"]], label="leaders' throttled rate (gauge)")
        ax.step(ts, [s["quota"] / MB for s in r["seconds"]], "k--", where="post", label="T")
        ax.set_ylabel("MB/s")
        whole = r["whole_move_mean_over_T"]
        head = f"whole move {whole:.3f} T, " if whole else ""
        ax.set_title(f"T = {r['label']}: {head}inner seconds {r['mean_over_T']:.3f} T", fontsize=10)
    axes[-1, 0].set_xlabel("seconds since broker 2 restarted")
    axes[0, 0].legend(fontsize=7, loc="lower right")
    save_figure(fig, "throttle")


if __name__ == "__main__":
    main()
