"""KIP-73 accuracy for partition reassignment: moves under a replication throttle T.

Each scenario runs on a fresh three-broker cluster: a topic of 20 partitions is created on
its source brokers, a backlog is produced, and the move is driven the operator's way,
`minibroker reassign --execute --throttle T` then `--verify` once the move is done (which
removes the throttle). The move starts when `/admin/reassign_partitions` is created (its
ctime) and ends when the controller deletes it.

    one_to_another               [0]    -> [1]
    one_to_another_with_traffic  [0]    -> [1], a producer writing IN = 1 MB/s into the moving partitions
    one_to_two                   [0]    -> [1, 2]
    two_to_one                   [0, 1] -> [2]

The bench samples the brokers' log files every 0.25 s (the per-second series in the JSON and
the plot are taken from those samples) and reports, per scenario:

- the achieved rate: the backlog the destinations had to copy at the start of the move over
  the move's duration (without traffic, the bytes the destinations received), and the body
  rate between 10% and 90% of it, both against the expected rate: T, T - IN with traffic
  (the backlog's catch-up rate; IN as measured on disk), and T in total for one_to_two,
  where broker 0's leader throttle covers what it sends to both destinations;
- KIP-73's MoveTime (`broker.controller.reassign_plan.move_time`) from the per-destination bytes and
  inbound rates, and the actual duration over it; a second estimate that also counts the
  leader side (for one_to_two broker 0 sends every byte twice);
- whether the moved replicas hold byte-identical logs to what the source held before the
  move. With traffic the source replica is deleted as the move completes, so there the
  check is: the destination's log starts with the source's pre-traffic bytes, its offsets
  are contiguous, and every message the producer had acknowledged is in it.

    .venv/bin/python -m bench.reassign [--scenarios a,b] [--backlog-mb 40] [--spread-backlog-mb 40]

Writes bench/out/reassign.json and bench/out/reassign.png, and copies both to docs/perf/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import OUT, ROOT, cluster, machine, progress, save_figure, write_json
from broker.controller.reassign_plan import move_time
from broker.logs import configure as configure_logging
from broker.zk.client import NoNodeError, ZkClient
from protocol.records.records import decode_records
from tests.support.replication import log_bytes, partition_bytes
from tests.support.tools import reassign
from tests.support.topics import create_topic
from tests.support.traffic import SteadyProducer, produce_bytes
from tests.support.waiting import wait_for

MB = 1_000_000
PARTITIONS = 20
THROTTLE = 5 * MB
INBOUND = 1 * MB
TOPIC = "mv"
REASSIGN = "/admin/reassign_partitions"
DOCS = ROOT / "docs" / "perf"
TICK = 0.25
MOVE_TIMEOUT = 240.0


@dataclass(frozen=True)
class Scenario:
    name: str
    source: list[int]
    dest: list[int]  # the new replica set
    traffic: bool = False

    @property
    def new(self) -> list[int]:
        return [b for b in self.dest if b not in self.source]


SCENARIOS = {s.name: s for s in [
    Scenario("one_to_another", [0], [1]),
    Scenario("one_to_another_with_traffic", [0], [1], traffic=True),
    Scenario("one_to_two", [0], [1, 2]),
    Scenario("two_to_one", [0, 1], [2]),
]}


def dir_bytes(broker, topic: str, p: int) -> int | None:  # noqa: ANN001
    """The partition's *.log bytes on that broker; None when the replica directory is gone."""
    d = broker.log_dir / f"{topic}-{p}"
    try:
        return sum(f.stat().st_size for f in d.glob("*.log")) if d.is_dir() else None
    except FileNotFoundError:  # deleted between the glob and the stat
        return None


@dataclass
class Sample:
    t: float  # wall clock
    source: int  # bytes of the source (the leader's) replicas still present
    received: int  # bytes on the new replicas, all destinations together
    lag: int  # sum over destinations and partitions of (source bytes - destination bytes), >= 0
    pending: int  # partitions still in /admin/reassign_partitions (-1: znode absent)


def take_sample(brokers, s: Scenario, leader: int, pending: int) -> Sample:  # noqa: ANN001
    src = [dir_bytes(brokers[leader], TOPIC, p) for p in range(PARTITIONS)]
    received, lag = 0, 0
    for d in s.new:
        for p in range(PARTITIONS):
            got = dir_bytes(brokers[d], TOPIC, p) or 0
            received += got
            if src[p] is not None:  # once the source replica is deleted the partition has moved
                lag += max(src[p] - got, 0)
    return Sample(time.time(), sum(b for b in src if b is not None), received, lag, pending)


def at(samples: list[Sample], t: float, attr: str) -> float:
    """The attribute linearly interpolated at wall time t."""
    if t <= samples[0].t:
        return getattr(samples[0], attr)
    for a, b in zip(samples, samples[1:], strict=False):
        if a.t <= t <= b.t:
            va, vb = getattr(a, attr), getattr(b, attr)
            return va + (vb - va) * (t - a.t) / (b.t - a.t) if b.t > a.t else vb
    return getattr(samples[-1], attr)


def crossing(samples: list[Sample], t0: float, lag0: float, fraction: float) -> float | None:
    """When the copied share of the starting backlog first reached `fraction` (interpolated)."""
    goal = fraction * lag0
    prev = None
    for smp in samples:
        if smp.t < t0:
            continue
        done = lag0 - smp.lag
        if done >= goal:
            if prev is None:
                return smp.t
            pd = lag0 - prev.lag
            return prev.t + (smp.t - prev.t) * (goal - pd) / (done - pd) if done > pd else smp.t
        prev = smp
    return None


async def partition_state(zk: ZkClient, p: int) -> dict:
    data, _ = await zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")
    return json.loads(data)


async def pending_partitions(zk: ZkClient) -> int:
    try:
        data, _ = await zk.get(REASSIGN)
    except NoNodeError:
        return -1
    try:
        return len(json.loads(data)["partitions"])
    except (ValueError, KeyError):
        return 0


async def run(s: Scenario, backlog: int, tmp: Path, overrides: dict[str, str]) -> dict:
    started = time.monotonic()
    with cluster(3, **overrides) as brokers:
        zk_connect = brokers[0].zk_connect
        bootstrap = ",".join(b.bootstrap for b in brokers)
        zk = ZkClient(zk_connect, 6000)
        await zk.start()
        producer: SteadyProducer | None = None
        thread: threading.Thread | None = None
        try:
            await create_topic(brokers[0], TOPIC, assignment={p: list(s.source) for p in range(PARTITIONS)})
            for p in range(PARTITIONS):
                await wait_for(f"ISR {s.source} of {TOPIC}-{p}", lambda p=p: _isr_is(zk, p, set(s.source)), 30, 0.25)
            progress(f"[{s.name}] producing a {backlog / MB:,.0f} MB backlog onto {s.source}")
            await asyncio.to_thread(produce_bytes, bootstrap, TOPIC, PARTITIONS, backlog)
            leader = (await partition_state(zk, 0))["leader"]
            leaders = {(await partition_state(zk, p))["leader"] for p in range(PARTITIONS)}
            assert leaders == {leader}, f"partitions led by {sorted(leaders)}"
            if len(s.source) > 1:
                # The followers must hold the whole backlog before the move (ISR alone allows a lag).
                async def replicated() -> bool:
                    return all(len({partition_bytes(brokers[b], TOPIC, p) for b in s.source}) == 1
                               for p in range(PARTITIONS))
                await wait_for("identical source replicas", replicated, 60, 0.5)
            before = {p: partition_bytes(brokers[leader], TOPIC, p) for p in range(PARTITIONS)}
            backlog_bytes = sum(map(len, before.values()))

            if s.traffic:
                producer = SteadyProducer(bootstrap, TOPIC, PARTITIONS, INBOUND, acks="all")
                thread = threading.Thread(target=producer.run, name="steady-producer", daemon=True)
                thread.start()
                await asyncio.sleep(2)  # a steady inbound rate before the move starts
                progress(f"[{s.name}] producer running at {INBOUND / MB} MB/s")

            plan = tmp / f"{s.name}.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": TOPIC, "partition": p, "replicas": s.dest} for p in range(PARTITIONS)]}))
            samples = [take_sample(brokers, s, leader, -1)]
            execute = asyncio.create_task(asyncio.to_thread(
                reassign, zk_connect, "--execute", "--reassignment-json-file", str(plan), "--throttle",
                str(THROTTLE)))
            while not execute.done():
                await asyncio.sleep(TICK / 2)
                samples.append(take_sample(brokers, s, leader, await pending_partitions(zk)))
            r = execute.result()
            if r.returncode != 0 or "Successfully started" not in r.stdout:
                raise RuntimeError(f"reassign --execute failed: {r.stdout}{r.stderr}")
            try:
                t0 = await zk.ctime_ms(REASSIGN) / 1000
            except NoNodeError:
                t0 = samples[-1].t  # already done (cannot happen with this much to copy)
            progress(f"[{s.name}] moving {backlog_bytes / MB:,.1f} MB {s.source} -> {s.dest} "
                     f"at T = {THROTTLE / MB} MB/s")

            finished, t_end, last_report = False, None, time.monotonic()
            while time.time() - t0 < MOVE_TIMEOUT:
                await asyncio.sleep(TICK)
                pending = await pending_partitions(zk)
                samples.append(take_sample(brokers, s, leader, pending))
                if pending < 0:
                    finished, t_end = True, samples[-1].t
                    break
                if time.monotonic() - last_report >= 5:
                    last_report = time.monotonic()
                    progress(f"[{s.name}]   t={samples[-1].t - t0:5.1f} s received "
                             f"{samples[-1].received / MB:6.1f} MB, lag {samples[-1].lag / MB:6.1f} MB, "
                             f"{pending} partitions pending")
            if t_end is None:
                t_end = samples[-1].t
                progress(f"[{s.name}] move NOT finished after {MOVE_TIMEOUT:.0f} s")
            else:
                progress(f"[{s.name}] move finished in {t_end - t0:.1f} s")

            if producer is not None and thread is not None:
                producer.stop.set()
                await asyncio.to_thread(thread.join, 90)
            v = reassign(zk_connect, "--verify", "--reassignment-json-file", str(plan))
            identical, detail = await check_identical(brokers, s, before, producer)
            removed = await _sources_removed(brokers, s)
            settled = sum(log_bytes(brokers[d], TOPIC) for d in s.new)
        finally:
            if producer is not None:
                producer.stop.set()
            await zk.close()

    duration = t_end - t0
    inbound_disk = None
    if producer is not None and producer.stopped > producer.started:
        # On-disk bytes the producer added (record overhead included), over the time it sent.
        inbound_disk = (settled - backlog_bytes * len(s.new)) / len(s.new) / (producer.stopped - producer.started)
    # Nothing moves before the znode exists: at t0 each destination has the whole source log to copy.
    # Take it from the last sample before t0 (every source replica is still there), grown by the inbound
    # rate since; interpolating across t0 would smear the first fetch's burst, and completed partitions'
    # source replicas are deleted soon after.
    last = max((smp for smp in samples if smp.t <= t0), key=lambda smp: smp.t, default=samples[0])
    lag0 = (last.source + (inbound_disk or 0.0) * (t0 - last.t)) * len(s.new)
    samples = sorted([*samples, Sample(t0, round(lag0 / len(s.new)), last.received, round(lag0), last.pending)],
                     key=lambda smp: smp.t)
    received = at(samples, t_end, "received") - last.received
    expected = THROTTLE - (inbound_disk or 0.0)
    achieved = lag0 / duration
    t10, t90 = crossing(samples, t0, lag0, 0.1), crossing(samples, t0, lag0, 0.9)
    t99 = crossing(samples, t0, lag0, 0.99)
    body = 0.8 * lag0 / (t90 - t10) if t10 is not None and t90 is not None and t90 > t10 else None
    first = next((smp for smp in samples if smp.received > last.received), None)

    per_dest = {d: lag0 / len(s.new) for d in s.new}
    inbound = {d: inbound_disk or 0.0 for d in s.new}
    est = move_time(per_dest, inbound, THROTTLE)
    # KIP-73's MoveTime counts the leader side too: broker `leader` sends every byte once per destination.
    est_both = move_time({**per_dest, leader: lag0}, {**inbound, leader: (inbound_disk or 0.0) * len(s.new)},
                         THROTTLE)

    seconds = []
    for k in range(int(duration) + 2):
        a, b = t0 + k, min(t0 + k + 1, samples[-1].t)
        if b <= a:
            break
        seconds.append({
            "t": k,
            "received_rate": round((at(samples, b, "received") - at(samples, a, "received")) / (b - a)),
            "catch_up_rate": round((at(samples, a, "lag") - at(samples, b, "lag")) / (b - a)),
            "pending_partitions": next((smp.pending for smp in samples if smp.t >= b), -1)})
    res = {
        "scenario": s.name, "source": s.source, "dest": s.dest, "partitions": PARTITIONS, "T": THROTTLE,
        "inbound_nominal": INBOUND if s.traffic else 0,
        "inbound_on_disk": round(inbound_disk) if inbound_disk is not None else None,
        "backlog_bytes": backlog_bytes, "bytes_to_move": round(lag0),
        "finished": finished, "move_seconds": round(duration, 2),
        # The first fetch is not held back (the quota is checked before it); what it brought, and when.
        "first_sample_with_bytes": {"t": round(first.t - t0, 2), "received": first.received} if first else None,
        # When 99% of the backlog had been copied; the rest of move_seconds is the last partitions'
        # tail and the controller completing the move (ISR, leader, assignment, znode).
        "t_99_percent_s": round(t99 - t0, 2) if t99 is not None else None,
        "received_bytes": round(received), "received_rate": round(received / duration),
        "expected_rate": round(expected), "achieved_rate": round(achieved),
        "achieved_over_expected": round(achieved / expected, 4),
        "body_rate": round(body) if body else None,
        "body_over_expected": round(body / expected, 4) if body else None,
        "movetime_estimate_s": round(est.seconds, 2) if est.seconds else None,
        "actual_over_estimate": round(duration / est.seconds, 4) if est.seconds else None,
        "movetime_estimate_with_leader_side_s": round(est_both.seconds, 2) if est_both.seconds else None,
        "actual_over_estimate_with_leader_side": round(duration / est_both.seconds, 4) if est_both.seconds else None,
        "identical": identical, "identical_check": detail,
        "old_replicas_removed": removed,
        "verify_rc": v.returncode, "throttle_removed": "Throttle was removed." in v.stdout,
        "scenario_wall_seconds": round(time.monotonic() - started, 1),
        "seconds": seconds,
    }
    if producer is not None:
        res["producer"] = {"sent": producer.sent, "acked": len(producer.acked),
                           "flush_seconds": round(producer.flush_seconds, 2), "unflushed": producer.unflushed,
                           "errors": producer.errors[:5]}
    return res


async def _isr_is(zk: ZkClient, p: int, isr: set[int]) -> bool:
    return set((await partition_state(zk, p))["isr"]) == isr


async def _sources_removed(brokers, s: Scenario) -> bool:  # noqa: ANN001
    gone = [b for b in s.source if b not in s.dest]

    async def check() -> bool:
        return not any((brokers[b].log_dir / f"{TOPIC}-{p}").exists() for b in gone for p in range(PARTITIONS))
    try:
        return await wait_for("the old replicas to be deleted", check, 15, 0.5)
    except AssertionError:  # timed out
        return False


async def check_identical(brokers, s: Scenario, before: dict[int, bytes],  # noqa: ANN001
                          producer: SteadyProducer | None) -> tuple[bool, str]:
    if producer is None:
        async def same() -> bool:
            return all(partition_bytes(brokers[d], TOPIC, p) == before[p] for d in s.new for p in range(PARTITIONS))
        try:
            await wait_for("identical replicas", same, 15, 0.5)
            return True, f"{len(s.new) * PARTITIONS} moved replicas byte-identical to the source's logs"
        except AssertionError:  # timed out
            bad = [(d, p) for d in s.new for p in range(PARTITIONS)
                   if partition_bytes(brokers[d], TOPIC, p) != before[p]]
            return False, f"differ: {bad[:10]}"
    acked: dict[int, set[int]] = {}
    for p, o in producer.acked:
        acked.setdefault(p, set()).add(o)
    problems = []
    for d in s.new:
        for p in range(PARTITIONS):
            blob = partition_bytes(brokers[d], TOPIC, p)
            if not blob.startswith(before[p]):
                problems.append(f"broker {d} {TOPIC}-{p}: pre-traffic bytes differ")
                continue
            offsets = [r.offset for r in decode_records(blob)]
            if offsets != list(range(len(offsets))):
                problems.append(f"broker {d} {TOPIC}-{p}: offsets not contiguous")
            missing = acked.get(p, set()) - set(offsets)
            if missing:
                problems.append(f"broker {d} {TOPIC}-{p}: {len(missing)} acknowledged messages missing")
    if problems:
        return False, "; ".join(problems[:10])
    return True, (f"every moved replica starts with the source's pre-traffic bytes, has contiguous offsets "
                  f"and holds all {len(producer.acked)} acknowledged messages")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--backlog-mb", type=float, default=40)
    ap.add_argument("--spread-backlog-mb", type=float, default=40, help="backlog of one_to_two and two_to_one")
    ap.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for every cluster (repeatable); the brokers' defaults otherwise")
    args = ap.parse_args()
    configure_logging(None, level="warning")  # client-side ZooKeeper events to stderr, warnings only
    overrides = dict(kv.split("=", 1) for kv in args.broker_config)
    wall = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-reassign-") as tmp:
        for name in args.scenarios.split(","):
            s = SCENARIOS[name]
            mb = args.spread_backlog_mb if name in ("one_to_two", "two_to_one") else args.backlog_mb
            res = asyncio.run(run(s, int(mb * MB), Path(tmp), overrides))
            results.append(res)
            progress(f"[{name}] achieved {res['achieved_over_expected']} of expected, body "
                     f"{res['body_over_expected']}, {res['move_seconds']} s = {res['actual_over_estimate']} "
                     f"MoveTime, identical {res['identical']}")
    data = {"bench": "reassign", "machine": machine(), "T": THROTTLE, "partitions": PARTITIONS,
            "broker_config": overrides,
            "wall_seconds": round(time.monotonic() - wall, 1), "scenarios": results}
    path = write_json("reassign", data)
    plot(results)
    DOCS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, DOCS / "reassign.json")
    shutil.copyfile(OUT / "reassign.png", DOCS / "reassign.png")
    progress(f"wrote {path}, {OUT / 'reassign.png'} and copies in {DOCS}")


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(8, 2.8 * len(results)), squeeze=False)
    for ax, r in zip(axes[:, 0], results, strict=True):
        secs = [*r["seconds"], r["seconds"][-1]]  # the last (partial) second drawn to the move's end
        ts = [x["t"] for x in r["seconds"]] + [max(r["move_seconds"], r["seconds"][-1]["t"])]
        ax.step(ts, [x["received_rate"] / MB for x in secs], where="post", label="received by destination(s)")
        if r["inbound_nominal"]:
            ax.step(ts, [x["catch_up_rate"] / MB for x in secs], where="post", label="backlog catch-up")
            ax.axhline(THROTTLE / MB, color="grey", linestyle=":", label="T")
        ax.axhline(r["expected_rate"] / MB, color="k", linestyle="--", label="expected")
        ax.axvline(r["move_seconds"], color="r", linewidth=0.8, label="move done")
        ax.set_ylabel("MB/s")
        ax.set_ylim(bottom=0)
        movetime = f"{r['actual_over_estimate'] or 0:.2f} x MoveTime"
        if r["actual_over_estimate_with_leader_side"] != r["actual_over_estimate"]:
            movetime += f" ({r['actual_over_estimate_with_leader_side'] or 0:.2f} x with the leader side)"
        ax.set_title(f"{r['scenario']} {r['source']} -> {r['dest']}: {r['achieved_over_expected']:.2f} of expected, "
                     f"body {r['body_over_expected'] or 0:.2f}, {movetime}", fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    axes[-1, 0].set_xlabel("seconds since /admin/reassign_partitions was created")
    save_figure(fig, "reassign")


if __name__ == "__main__":
    main()
