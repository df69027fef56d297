"""Partition reassignment with KIP-73 throttles on three real brokers (KIP-73's test plan, scaled).

Every move is driven the operator's way, through `minibroker reassign` subprocesses, and
checked on the brokers' own log files: the moved replicas are byte-identical to what the
source held (so no acknowledged message was lost), the removed replicas are gone, and the
throttle is removed only once the whole move has completed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cluster import Cluster
from tests.support.metrics import metric
from tests.support.replication import MB, log_bytes, mean_rate, partition_bytes, rate_profile, sample_catch_up
from tests.support.tools import ROOT, reassign
from tests.support.traffic import produce_bytes, steady_producer

pytestmark = pytest.mark.integration


def plan_file(tmp_path: Path, moves: dict[tuple[str, int], list[int]], name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(moves.items())]}))
    return str(path)


async def assignment(cluster: Cluster, topic: str) -> dict[int, list[int]]:
    data, _ = await cluster.zk.get(f"/brokers/topics/{topic}")
    return {int(p): r for p, r in json.loads(data)["partitions"].items()}


async def entity(cluster: Cluster, path: str) -> dict[str, str]:
    try:
        data, _ = await cluster.zk.get(f"/config/{path}")
    except Exception:
        return {}
    return json.loads(data)["config"]


async def wait_done(cluster: Cluster, timeout: float) -> None:
    async def gone() -> bool:
        return not await cluster.zk.exists("/admin/reassign_partitions")
    await cluster.wait_for("the reassignment znode to go", gone, timeout, interval=0.25)


def steady_rate(samples: list[tuple[float, int]], target: int) -> float:
    """The rate between 10% and 90% of the bytes to move."""
    lo = next((t, b) for t, b in samples if b >= 0.1 * target)
    hi = next((t, b) for t, b in samples if b >= 0.9 * target)
    return (hi[1] - lo[1]) / (hi[0] - lo[0])


async def test_one_broker_to_another_at_the_throttle_with_progress_and_verify(
        cluster: Cluster, zk_server, tmp_path: Path) -> None:  # noqa: ANN001
    zk, rate, parts = zk_server.connect_string, 5 * MB, 20
    await cluster.create_topic("mv", assignment={p: [0] for p in range(parts)})
    await asyncio.to_thread(produce_bytes, cluster.bootstrap, "mv", parts, 40 * MB)
    before = {p: partition_bytes(cluster.by_id(0), "mv", p) for p in range(parts)}
    target = sum(len(b) for b in before.values())
    plan = plan_file(tmp_path, {("mv", p): [1] for p in range(parts)})

    r = reassign(zk, "--execute", "--reassignment-json-file", plan, "--throttle", str(rate))
    assert r.returncode == 0, r.stderr
    assert "Successfully started reassignment of partitions." in r.stdout
    # Kafka's throttle lists: leaders are all current replicas, followers the destinations.
    topic_cfg = await entity(cluster, "topics/mv")
    assert topic_cfg["leader.replication.throttled.replicas"] == ",".join(f"{p}:0" for p in range(parts))
    assert topic_cfg["follower.replication.throttled.replicas"] == ",".join(f"{p}:1" for p in range(parts))
    for b in (0, 1):
        assert (await entity(cluster, f"brokers/{b}"))["follower.replication.throttled.rate"] == str(rate)

    watcher = subprocess.Popen([sys.executable, "-m", "broker", "reassign", "--zookeeper", zk, "--verify",
                                "--reassignment-json-file", plan, "--watch", "--interval", "1"],
                               cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    await asyncio.sleep(2)
    # Mid-move --verify reports progress and leaves the throttle alone.
    mid = reassign(zk, "--verify", "--reassignment-json-file", plan)
    assert "in progress" in mid.stdout and "Throttle was removed." not in mid.stdout, mid.stdout
    assert (await entity(cluster, "brokers/1")).get("follower.replication.throttled.rate") == str(rate)

    samples = await sample_catch_up(cluster.by_id(1), "mv", target, timeout=60)
    # The body of the move runs at the throttle; its tail is slower, as the last partitions
    # each move at most replica.fetch.max.bytes per fetch (the whole-move mean is in the bench).
    body = steady_rate(samples, target)
    assert 0.85 * rate <= body <= 1.05 * rate, (
        f"{body / MB:.2f} MB/s against {rate / MB} MB/s; MB/s per 2 s: {rate_profile(samples)}")
    assert mean_rate(samples) >= 0.7 * rate
    await wait_done(cluster, 30)
    out, err = await asyncio.to_thread(watcher.communicate, timeout=60)
    assert watcher.returncode == 0, err
    assert "remaining" in out and "SumReplicaLag" in out and "ETA" in out and "MoveTime" in out, out
    assert "completed successfully" in out and out.rstrip().endswith("Throttle was removed."), out
    for b in (0, 1):
        cfg = await entity(cluster, f"brokers/{b}")
        assert "follower.replication.throttled.rate" not in cfg and "leader.replication.throttled.rate" not in cfg
    assert "leader.replication.throttled.replicas" not in await entity(cluster, "topics/mv")

    assert await assignment(cluster, "mv") == {p: [1] for p in range(parts)}
    for p in range(parts):
        st = await cluster.state("mv", p)
        assert st["leader"] == 1 and st["isr"] == [1]
        assert partition_bytes(cluster.by_id(1), "mv", p) == before[p]

    async def removed() -> bool:
        return not any((cluster.by_id(0).log_dir / f"mv-{p}").exists() for p in range(parts))
    await cluster.wait_for("the old replicas to be deleted", removed, 10)


async def test_move_under_produce_traffic_progresses_at_t_minus_inbound_and_live_rate_change(
        cluster: Cluster, zk_server, tmp_path: Path) -> None:  # noqa: ANN001
    zk, rate, inbound, parts = zk_server.connect_string, 3 * MB, 1 * MB, 10
    await cluster.create_topic("busy", assignment={p: [0] for p in range(parts)})
    # Big enough that no partition finishes (and leaves broker 0) while the rates are measured.
    await asyncio.to_thread(produce_bytes, cluster.bootstrap, "busy", parts, 40 * MB)
    plan = plan_file(tmp_path, {("busy", p): [2] for p in range(parts)})
    stop = asyncio.Event()
    acked: list[tuple[int, int]] = []

    producer = asyncio.create_task(asyncio.to_thread(steady_producer, cluster.bootstrap, "busy", parts, inbound,
                                                     stop, acked, "all"))
    try:
        await asyncio.sleep(1)
        r = reassign(zk, "--execute", "--reassignment-json-file", plan, "--throttle", str(rate))
        assert r.returncode == 0, r.stderr
        await asyncio.sleep(3)  # past the first window

        def sizes(broker: int) -> dict[int, int]:
            d = cluster.by_id(broker).log_dir
            return {p: sum(f.stat().st_size for f in (d / f"busy-{p}").glob("*.log"))
                    for p in range(parts) if (d / f"busy-{p}").exists()}

        t0, src0, dst0 = time.monotonic(), sizes(0), sizes(2)
        await asyncio.sleep(5)
        t1, src1, dst1 = time.monotonic(), sizes(0), sizes(2)
        # Only partitions still moving at the end count: a finished one leaves broker 0.
        moving = [p for p in src1 if p in src0 and p in dst0 and p in dst1]
        assert len(moving) >= parts // 2, f"most partitions finished already: {sorted(moving)}"
        dt = t1 - t0
        lag0 = sum(src0[p] - dst0[p] for p in moving)
        lag1 = sum(src1[p] - dst1[p] for p in moving)
        catch_up = (lag0 - lag1) / dt
        # The throttle goes to the partitions still moving; they get their share of the inbound rate.
        share = len(moving) / parts
        detail = (f"catch-up {catch_up / MB:.2f} MB/s over {len(moving)} partitions; source grew "
                  f"{sum(src1[p] - src0[p] for p in moving) / dt / MB:.2f} MB/s, destination "
                  f"{sum(dst1[p] - dst0[p] for p in moving) / dt / MB:.2f} MB/s")
        expected = rate - inbound * share
        assert 0.75 * expected <= catch_up <= 1.1 * expected, detail

        # A re-run of the same plan only changes the rate, and every broker involved applies it within 2 s.
        new_rate = 9 * MB
        changed_at = time.monotonic()
        r = reassign(zk, "--execute", "--reassignment-json-file", plan, "--throttle", str(new_rate))
        assert r.returncode == 0 and "There is an existing assignment running." in r.stdout, r.stdout + r.stderr

        async def applied() -> bool:
            return all(metric(cluster.by_id(b), "follower_replication_throttle_bytes_per_second") == new_rate
                       for b in (0, 2))
        await cluster.wait_for("the new rate on brokers 0 and 2", applied, 2.0, interval=0.1)
        assert time.monotonic() - changed_at < 2 + 5  # the tool's own start-up included
        t2, got2 = time.monotonic(), log_bytes(cluster.by_id(2), "busy")
        await asyncio.sleep(2)
        faster = (log_bytes(cluster.by_id(2), "busy") - got2) / (time.monotonic() - t2)
        assert faster > 1.5 * rate, f"{faster / MB:.2f} MB/s after raising the throttle to {new_rate / MB} MB/s"

        await wait_done(cluster, 60)
    finally:
        stop.set()
        await producer
    assert reassign(zk, "--verify", "--reassignment-json-file", plan).returncode == 0
    # Every message acknowledged during the move is in the moved replica.
    for p in range(parts):
        st = await cluster.state("busy", p)
        assert st["leader"] == 2
    await asyncio.sleep(1)
    blob = {p: partition_bytes(cluster.by_id(2), "busy", p) for p in range(parts)}
    from protocol.records.records import decode_records

    offsets = {p: {r.offset for r in decode_records(blob[p])} for p in range(parts)}
    assert acked and all(o in offsets[p] for p, o in acked)


async def test_one_to_two_and_two_to_one(cluster: Cluster, zk_server, tmp_path: Path) -> None:  # noqa: ANN001
    zk, rate = zk_server.connect_string, 5 * MB
    await cluster.create_topic("spread", assignment={p: [0] for p in range(4)})
    await cluster.create_topic("gather", assignment={p: [0, 1] for p in range(4)})
    for p in range(4):
        await cluster.wait_isr("gather", p, {0, 1})
    await asyncio.to_thread(produce_bytes, cluster.bootstrap, "spread", 4, 8 * MB)
    await asyncio.to_thread(produce_bytes, cluster.bootstrap, "gather", 4, 8 * MB)
    spread_before = {p: partition_bytes(cluster.by_id(0), "spread", p) for p in range(4)}
    gather_before = {p: partition_bytes(cluster.by_id(0), "gather", p) for p in range(4)}

    # One node to two: broker 0 sends every partition twice, within its leader throttle.
    plan = plan_file(tmp_path, {("spread", p): [1, 2] for p in range(4)}, "spread.json")
    started = time.monotonic()
    assert reassign(zk, "--execute", "--reassignment-json-file", plan, "--throttle", str(rate)).returncode == 0
    await wait_done(cluster, 60)
    elapsed = time.monotonic() - started
    received = log_bytes(cluster.by_id(1), "spread") + log_bytes(cluster.by_id(2), "spread")
    # The leader's budget covers both followers: what they received together fits T over the
    # move, plus the one window's worth a rate may take at once when a throttle starts.
    assert received <= 1.05 * rate * (elapsed + 1), f"{received / MB:.1f} MB in {elapsed:.1f} s"
    assert received == 2 * sum(map(len, spread_before.values()))
    v = reassign(zk, "--verify", "--reassignment-json-file", plan)
    assert v.returncode == 0 and "Throttle was removed." in v.stdout, v.stdout
    assert await assignment(cluster, "spread") == {p: [1, 2] for p in range(4)}
    for p in range(4):
        assert set((await cluster.state("spread", p))["isr"]) == {1, 2}
        for b in (1, 2):
            assert partition_bytes(cluster.by_id(b), "spread", p) == spread_before[p]

    # Two nodes to one: broker 2 copies from the leader; 0 and 1 drop their replicas.
    plan = plan_file(tmp_path, {("gather", p): [2] for p in range(4)}, "gather.json")
    assert reassign(zk, "--execute", "--reassignment-json-file", plan, "--throttle", str(rate)).returncode == 0
    await wait_done(cluster, 60)
    v = reassign(zk, "--verify", "--reassignment-json-file", plan)
    assert v.returncode == 0 and "Throttle was removed." in v.stdout, v.stdout
    assert await assignment(cluster, "gather") == {p: [2] for p in range(4)}
    for p in range(4):
        st = await cluster.state("gather", p)
        assert st["leader"] == 2 and st["isr"] == [2]
        assert partition_bytes(cluster.by_id(2), "gather", p) == gather_before[p]


async def test_controller_failover_mid_move_resumes(cluster: Cluster, zk_server, tmp_path: Path) -> None:  # noqa: ANN001
    zk = zk_server.connect_string
    controller = await cluster.controller()
    src, dst = [b for b in (0, 1, 2) if b != controller]
    await cluster.create_topic("fo", assignment={p: [src] for p in range(6)})
    await asyncio.to_thread(produce_bytes, cluster.bootstrap, "fo", 6, 15 * MB)
    before = {p: partition_bytes(cluster.by_id(src), "fo", p) for p in range(6)}
    plan = plan_file(tmp_path, {("fo", p): [dst] for p in range(6)})
    assert reassign(zk, "--execute", "--reassignment-json-file", plan, "--throttle", str(3 * MB)).returncode == 0
    await asyncio.sleep(1.5)
    cluster.by_id(controller).kill()

    async def new_controller() -> bool:
        try:
            return await cluster.controller() != controller
        except Exception:
            return False
    await cluster.wait_for("a new controller", new_controller, 20)
    await wait_done(cluster, 60)
    assert await assignment(cluster, "fo") == {p: [dst] for p in range(6)}
    for p in range(6):
        assert (await cluster.state("fo", p))["leader"] == dst
        assert partition_bytes(cluster.by_id(dst), "fo", p) == before[p]


async def test_bad_input_is_refused_and_changes_nothing(cluster: Cluster, zk_server, tmp_path: Path) -> None:  # noqa: ANN001
    zk = zk_server.connect_string
    await cluster.create_topic("bad", assignment={p: [0] for p in range(2)})
    await asyncio.to_thread(produce_bytes, cluster.bootstrap, "bad", 2, 6 * MB)

    async def snapshot() -> tuple[object, ...]:
        return (await assignment(cluster, "bad"), await entity(cluster, "topics/bad"),
                await entity(cluster, "brokers/1"), await cluster.zk.exists("/admin/reassign_partitions"))

    # --generate: Kafka's output blocks, a proposal over exactly the given brokers, and the MoveRatio.
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "bad"}]}))
    g = reassign(zk, "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,2")
    assert g.returncode == 0, g.stderr
    blocks = g.stdout.split("\n\n")
    assert blocks[0] == "Current partition replica assignment"
    assert json.loads(blocks[1]) == {"version": 1, "partitions": [
        {"topic": "bad", "partition": p, "replicas": [0]} for p in range(2)]}
    proposed = json.loads(blocks[3])["partitions"]
    assert sorted(r for item in proposed for r in item["replicas"]) == [1, 2]
    assert "MoveRatio: 1.000" in g.stdout
    g = reassign(zk, "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,9")
    assert g.returncode != 0 and "broker(s) [9] are not registered" in g.stderr

    start = await snapshot()
    cases = {
        "unknown topic": ({("nope", 0): [1]}, [], "topic 'nope' does not exist"),
        "unknown partition": ({("bad", 7): [1]}, [], "partition bad-7 does not exist"),
        "unknown broker": ({("bad", 0): [9]}, [], "broker(s) [9] are not registered"),
        "duplicate replicas": ({("bad", 0): [1, 1]}, [], "duplicate replicas"),
        "non-numeric throttle": ({("bad", 0): [1]}, ["--throttle", "5MB"], "--throttle must be a whole number"),
    }
    for name, (moves, extra, needle) in cases.items():
        r = reassign(zk, "--execute", "--reassignment-json-file", plan_file(tmp_path, moves), *extra)
        assert r.returncode != 0 and needle in r.stderr, (name, r.stdout, r.stderr)
        assert await snapshot() == start, name

    # A second, different plan while one runs is refused; the running one is untouched.
    plan = plan_file(tmp_path, {("bad", p): [1] for p in range(2)}, "running.json")
    assert reassign(zk, "--execute", "--reassignment-json-file", plan, "--throttle", str(1 * MB)).returncode == 0
    running, _ = await cluster.zk.get("/admin/reassign_partitions")
    other = plan_file(tmp_path, {("bad", p): [2] for p in range(2)}, "other.json")
    r = reassign(zk, "--execute", "--reassignment-json-file", other, "--throttle", str(9 * MB))
    assert r.returncode != 0 and "a different reassignment is running" in r.stderr, r.stdout + r.stderr
    assert (await cluster.zk.get("/admin/reassign_partitions"))[0] == running
    assert (await entity(cluster, "brokers/1"))["follower.replication.throttled.rate"] == str(1 * MB)
    assert "follower.replication.throttled.rate" not in await entity(cluster, "brokers/2")
    await wait_done(cluster, 60)

    # Nobody ran --verify: the throttle outlives the move and the brokers say so.
    async def warned() -> bool:
        return "throttle.leftover" in cluster.by_id(1).log()
    await cluster.wait_for("a leftover-throttle warning", warned, 15, interval=0.5)
    v = reassign(zk, "--verify", "--reassignment-json-file", plan)
    assert "Throttle was removed." in v.stdout, v.stdout
