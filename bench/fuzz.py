"""The long fuzz run: mutated real-client requests against one broker, with a good client beside them.

    .venv/bin/python -m bench.fuzz --requests 1000000 [--seed N] [--connections 32] [--max-seconds S]

One broker (its own ZooKeeper, socket.request.max.bytes 1 MiB so oversized frames are cheap to
send, no topic auto-creation, its controller epoch moved far from the one the seeds carry:
tests/fuzz/runner.age_controller_epoch), the seeds of tests/fuzz/seeds mutated as in tests/fuzz, over a
bounded pool of connections to 127.0.0.1 only, and a good client producing with acks=all and
reading back. Prints JSON and writes bench/out/fuzz.json and bench/out/fuzz.png (the good
client's latency percentiles and the broker's RSS over time). Figures: requests sent,
connections, broker RSS before and after, good-client errors (must be 0), acknowledged
messages missing (must be 0), the good client's p99 latency, and the health checks of
tests/fuzz/test_fuzz.py.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.common import cluster, machine, progress, save_figure, write_json
from protocol.api_keys import ApiKey
from tests.fuzz.runner import (
    RunResult,
    answers,
    dirs_outside,
    random_topic,
    rss_bytes,
    run_fuzz,
    socket_count,
    sockets_back,
    tracebacks,
)
from tests.support.topics import create_topic

MAX_FRAME = 1 << 20
WINDOW_S = 10


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else 0.0


async def run(args: argparse.Namespace) -> dict:
    with cluster(1, **{"socket.request.max.bytes": str(MAX_FRAME), "auto.create.topics.enable": "false"}) as [b]:
        assert b.proc is not None
        pid = b.proc.pid
        topic = random_topic(args.seed)
        await create_topic(b, topic)
        sockets_before = socket_count(pid)
        dirs_before = dirs_outside(b.workdir, b.log_dir, parent=False)
        last = [0.0]

        def report(smp) -> None:  # noqa: ANN001 - a runner.Sample
            if smp.t - last[0] >= 30:
                last[0] = smp.t
                progress(f"{smp.sent:,} requests, broker RSS {smp.rss >> 20} MiB, {smp.sockets} sockets")

        exclude = tuple(int(ApiKey[name.upper()]) for name in args.exclude)
        result = await run_fuzz(pid, b.port, topic, zk_connect=b.zk_connect, seed=args.seed, requests=args.requests,
                                duration=args.max_seconds, max_frame=MAX_FRAME, connections=args.connections,
                                rss_limit=args.rss_limit << 20, exclude=exclude, on_sample=report)
        alive = b.proc.poll() is None
        health = {
            "alive": alive,
            "answers_api_versions_and_metadata": alive and await answers(b.port),
            "rss_after": rss_bytes(pid) if alive else None,
            "sockets_before": sockets_before,
            "sockets_after": await sockets_back(pid, sockets_before) if alive else None,
            "tracebacks": len(tracebacks(b.log_path.read_text())),
            "dirs_outside_log_dirs": sorted(dirs_outside(b.workdir, b.log_dir, parent=False) - dirs_before),
        }
        missing = await result.good.verify() if health["answers_api_versions_and_metadata"] else ["not checked"]
        if result.rss_exceeded or not health["answers_api_versions_and_metadata"]:
            b.kill()
        return summary(args, result, health, missing)


def summary(args: argparse.Namespace, r: RunResult, health: dict, missing: list[str]) -> dict:
    s = r.stats
    lat = [d for _, d in r.good.latencies]
    t0 = r.good.latencies[0][0] if r.good.latencies else time.monotonic()
    windows: dict[int, list[float]] = {}
    for when, d in r.good.latencies:
        windows.setdefault(int((when - t0) // WINDOW_S), []).append(d)
    return {
        "bench": "fuzz", "machine": machine(), "seed": r.seed, "requests_asked": args.requests,
        "excluded_apis": args.exclude,
        "requests_sent": s.sent, "connections": s.connections, "elapsed_s": round(r.elapsed, 1),
        "answered": s.responses, "closed_by_broker": s.closed_by_broker, "timed_out": s.timeouts,
        "refused_connects": s.refused, "skipped_unsafe": s.skipped_unsafe, "bad_responses": s.bad_responses,
        "rss_before": r.rss_before, "rss_after": health["rss_after"], "rss_limit_exceeded": r.rss_exceeded,
        "good_client": {"batches": r.good.batches, "acked_messages": len(r.good.acked), "errors": len(r.good.errors),
                        "first_errors": r.good.errors[:10], "missing_after": len(missing), "first_missing": missing[:10],
                        "p50_ms": round(_percentile(lat, 0.5) * 1000, 1), "p99_ms": r.good_p99_ms(),
                        "max_ms": round(max(lat, default=0) * 1000, 1)},
        "health": health,
        "last_unanswered_cases": list(s.timed_out)[-20:],
        "series": {
            "latency_windows": [(w * WINDOW_S, round(_percentile(v, 0.5) * 1000, 2),
                                 round(_percentile(v, 0.99) * 1000, 2)) for w, v in sorted(windows.items())],
            "rss": [(round(x.t, 1), x.rss) for x in r.samples],
            "sent": [(round(x.t, 1), x.sent) for x in r.samples],
        },
    }


def plot(data: dict) -> None:
    try:
        import matplotlib
    except ImportError:
        progress("matplotlib is not installed (pip install -e '.[bench]'): no PNG")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    lw = data["series"]["latency_windows"]
    ax1.plot([t for t, _, _ in lw], [p50 for _, p50, _ in lw], label="p50", lw=1)
    ax1.plot([t for t, _, _ in lw], [p99 for _, _, p99 in lw], label="p99", lw=1)
    ax1.set_ylabel(f"good client ms ({WINDOW_S} s windows)")
    ax1.set_title(f"fuzz: {data['requests_sent']:,} requests over {data['connections']:,} connections; "
                  f"good-client errors {data['good_client']['errors']}", fontsize=9)
    ax1.legend(fontsize=7)
    rss = data["series"]["rss"]
    ax2.plot([t for t, _ in rss], [v / (1 << 20) for _, v in rss], lw=1)
    ax2.set_ylabel("broker RSS (MiB)")
    ax2.set_xlabel("seconds")
    save_figure(fig, "fuzz", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--max-seconds", type=float, default=6 * 3600)
    ap.add_argument("--rss-limit", type=int, default=2048, help="MiB: past this the run stops (a finding)")
    ap.add_argument("--exclude", nargs="*", default=[], help="API names (e.g. create_topics) whose seeds to leave out")
    args = ap.parse_args()
    data = asyncio.run(run(args))
    write_json("fuzz", data)
    plot(data)


if __name__ == "__main__":
    main()
