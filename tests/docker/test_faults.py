"""Faults across containers under acks=all, RF=3, min.insync.replicas=2, with the checker
(tests/support/fault_checker.py): every acknowledged write is read back, at its acknowledged
offset, from every replica at the end. Zero lost is the bar; duplicates (retries without
idempotence) and the longest gap between acknowledgements are reported in the table printed at
the end of the run.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.compose import BROKERS, ComposeCluster
from tests.support.fault_checker import (
    AckRecorder,
    Verdict,
    partition_state,
    read_replica,
    verdict,
    wait_state,
)
from tests.support.topics import create_topic
from tests.support.wire import connect, produce

pytestmark = pytest.mark.docker

PARTITIONS = 3
SESSION_TIMEOUT_S = 6.0  # zookeeper.session.timeout.ms, Kafka's default (the compose file keeps it)


async def _start(cluster: ComposeCluster, topic: str) -> AckRecorder:
    await create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3,
                       configs={"min.insync.replicas": "2"})
    recorder = AckRecorder(cluster.bootstrap, topic, PARTITIONS).start()
    recorder.wait_acks(300)
    return recorder


async def _leader(cluster: ComposeCluster, topic: str, partition: int = 0, via: int = 1) -> int:
    leader, _ = await partition_state(*cluster.address(via), topic, partition)
    return leader


async def _full_isr(cluster: ComposeCluster, topic: str, via: list[int] | None = None) -> None:
    await wait_state([cluster.address(b) for b in (via or list(BROKERS))], topic, PARTITIONS,
                     "every replica back in the ISR", lambda leader, isr: leader > 0 and isr == [1, 2, 3])


async def _finish(fault: str, cluster: ComposeCluster, recorder: AckRecorder, table: list[Verdict]) -> Verdict:
    recorder.wait_acks(200)  # serving again, on every partition's new leader
    recorder.stop()
    assert recorder.unflushed == 0, recorder.failed[-5:]
    await _full_isr(cluster, recorder.topic)
    v = await verdict(fault, recorder, {b: cluster.address(b) for b in BROKERS})
    table.append(v)
    print(v.row())
    assert v.lost == [], f"{len(v.lost)} acknowledged writes missing, first: {v.lost[:10]}"
    return v


async def test_kill_the_leader(compose_cluster: ComposeCluster, fault_table: list[Verdict]) -> None:
    cluster, topic = compose_cluster, "kill"
    recorder = await _start(cluster, topic)
    leader = await _leader(cluster, topic)
    cluster.kill(f"broker{leader}")
    others = [b for b in BROKERS if b != leader]
    await wait_state([cluster.address(b) for b in others], topic, PARTITIONS, "a new leader",
                     lambda lead, isr: lead in others)
    recorder.wait_acks(300)
    cluster.start(f"broker{leader}")
    cluster.wait_healthy([f"broker{leader}"])
    await _finish("docker kill leader", cluster, recorder, fault_table)


async def test_network_partition_of_the_leader(compose_cluster: ComposeCluster, fault_table: list[Verdict]) -> None:
    """The leader is cut from brokers and ZooKeeper while the host still reaches it: it cannot
    replicate, so it acknowledges nothing acks=all (min.insync.replicas=2) — anything it had
    acknowledged would be missing later, after it truncates to follow the new leader."""
    cluster, topic = compose_cluster, "partition"
    recorder = await _start(cluster, topic)
    leader = await _leader(cluster, topic)
    others = [b for b in BROKERS if b != leader]
    acked_before = len(recorder.acked)
    cluster.disconnect(f"broker{leader}")
    try:
        # Straight to the isolated leader through its published port, as a host client whose
        # metadata still names it: partition 0's writes there are refused or time out, never
        # acknowledged (it cannot replicate them to the min.insync.replicas=2 it needs).
        refused = await _produce_to_isolated(cluster, leader, topic)
        await wait_state([cluster.address(b) for b in others], topic, PARTITIONS, "a leader on the majority side",
                         lambda lead, isr: lead in others, timeout=120)
        recorder.wait_acks(200)
        await asyncio.sleep(SESSION_TIMEOUT_S)  # keep the isolated leader isolated a while longer
    finally:
        cluster.reconnect(f"broker{leader}")
    assert len(recorder.acked) > acked_before
    # Back on the network: it re-registers, learns it is no longer leader, truncates and follows.
    await wait_state([cluster.address(leader)], topic, PARTITIONS, "the old leader following the new one",
                     lambda lead, isr: lead in others, timeout=120)
    await _finish("network partition of leader", cluster, recorder, fault_table)
    # What the isolated leader appended but could not acknowledge went when it truncated to follow.
    for b in BROKERS:
        on_replica = set((await read_replica(*cluster.address(b), topic, 0)).values())
        assert not on_replica & set(refused), (b, sorted(on_replica & set(refused)))


async def _produce_to_isolated(cluster: ComposeCluster, leader: int, topic: str) -> list[bytes]:
    """Three acks=all writes to partition 0 on the isolated `leader` (a connection of their own
    each, 5 s request timeout); each must come back with an error or not at all. Their values."""
    values, outcomes = [], []
    for i in range(3):
        value = b"isolated-%d" % i
        values.append(value)
        try:
            async with await connect(f"{cluster.address(leader)[0]}:{cluster.address(leader)[1]}") as conn:
                r = await asyncio.wait_for(produce(conn, topic, 0, [(None, value)], acks=-1), 20)
        except (TimeoutError, OSError, ConnectionError) as e:
            outcomes.append(type(e).__name__)  # no answer at all: not acknowledged
            continue
        outcomes.append(f"error {r['error_code']}")
        assert r["error_code"] != 0, f"the isolated leader acknowledged an acks=all write it cannot replicate: {r}"
    print(f"acks=all writes to the isolated leader {leader}: {outcomes}")
    return values


async def test_pause_past_the_session_timeout(compose_cluster: ComposeCluster, fault_table: list[Verdict]) -> None:
    cluster, topic = compose_cluster, "pause"
    recorder = await _start(cluster, topic)
    leader = await _leader(cluster, topic)
    others = [b for b in BROKERS if b != leader]
    cluster.pause(f"broker{leader}")
    try:
        await wait_state([cluster.address(b) for b in others], topic, PARTITIONS, "a new leader while paused",
                         lambda lead, isr: lead in others, timeout=60)
        time.sleep(2)
    finally:
        cluster.unpause(f"broker{leader}")
    # It re-registers with a new session, steps down, and rejoins every ISR.
    await _full_isr(cluster, topic)
    await _finish("docker pause leader > session", cluster, recorder, fault_table)


async def test_rolling_restart(compose_cluster: ComposeCluster, fault_table: list[Verdict]) -> None:
    cluster, topic = compose_cluster, "rolling"
    recorder = await _start(cluster, topic)
    for b in BROKERS:
        cluster.restart(f"broker{b}")  # SIGTERM: controlled shutdown, then start
        cluster.wait_healthy([f"broker{b}"])
        await _full_isr(cluster, topic)
        recorder.wait_acks(100)
    v = await _finish("rolling restart", cluster, recorder, fault_table)
    print(f"rolling restart: longest produce stall {v.longest_unavailability:.1f} s")


async def test_zookeeper_restart_with_a_config_change(compose_cluster: ComposeCluster,
                                                       fault_table: list[Verdict]) -> None:
    """ZooKeeper restarted mid-stream; a config change written as soon as it is back (while the
    brokers are still reconnecting) is applied by each broker once."""
    cluster, topic = compose_cluster, "zkrestart"
    recorder = await _start(cluster, topic)
    cluster.docker("stop", "-t", "5", cluster.container("zookeeper"))
    time.sleep(3)
    cluster.start("zookeeper")
    cluster.wait_healthy(["zookeeper"], timeout=60)
    # A client quota far above this test's traffic: observable, harmless.
    cluster.exec("zookeeper", "minibroker", "configs", "--zookeeper", "127.0.0.1:2181", "--entity-type", "clients",
                 "--entity-default", "--alter", "--add-config", "producer_byte_rate=1073741824")
    cluster.wait_healthy(timeout=120)
    recorder.wait_acks(300, timeout=120)

    def applied() -> dict[int, int]:
        return {b: cluster.logs(f"broker{b}").count('"event": "config.notification_applied"') for b in BROKERS}

    deadline = time.monotonic() + 60
    while set(applied().values()) != {1} and time.monotonic() < deadline:
        time.sleep(1)
    assert applied() == {1: 1, 2: 1, 3: 1}
    await _finish("zookeeper restart + config", cluster, recorder, fault_table)
