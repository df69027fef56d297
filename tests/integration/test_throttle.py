"""KIP-73 replication throttles on three real brokers, set at run time through ZooKeeper.

Scaled from KIP-73's test plan to this 2-core machine: a broker that was down while data
arrived catches up at the throttled rate T, measured from its own log growth.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.cluster import Cluster, wait_identical_replicas
from tests.support.metrics import metric
from tests.support.replication import (
    MB,
    log_bytes,
    mean_rate,
    rate_profile,
    sample_catch_up,
    set_throttle,
    set_throttle_rate,
    throttle_all_replicas,
)
from tests.support.traffic import produce_bytes, steady_producer

pytestmark = pytest.mark.integration


async def wait_rate_everywhere(cluster: Cluster, rate: int) -> None:
    """Until every broker reports `rate` as its leader and follower replication throttle."""
    def applied() -> bool:
        try:
            return all(metric(b, "leader_replication_throttle_bytes_per_second") == rate
                       and metric(b, "follower_replication_throttle_bytes_per_second") == rate
                       for b in cluster.brokers)
        except (OSError, KeyError):
            return False
    await cluster.wait_for(f"throttled rate {rate} on every broker", applied, timeout=20)


async def stopped_follower_with_backlog(cluster: Cluster, topic: str, partitions: int, total: int) -> None:
    # Broker 2 follows every partition, so all of its catch-up goes through its follower quota.
    await cluster.create_topic(topic, assignment={p: [p % 2, 2] for p in range(partitions)})
    for p in range(partitions):
        await cluster.wait_isr(topic, p, {p % 2, 2})
    assert cluster.by_id(2).stop() == 0
    await asyncio.to_thread(produce_bytes, cluster.bootstrap, topic, partitions, total)


async def test_bootstrapping_broker_catches_up_at_the_throttled_rate(cluster: Cluster, zk_server) -> None:  # noqa: ANN001
    rate = 5 * MB
    await stopped_follower_with_backlog(cluster, "boot", 40, 100 * MB)
    target = log_bytes(cluster.by_id(0), "boot") + log_bytes(cluster.by_id(1), "boot")
    set_throttle(zk_server.connect_string, "boot", rate)
    b2 = cluster.by_id(2)
    b2.start()
    metric_samples: list[float] = []

    async def scrape() -> None:
        while True:
            await asyncio.sleep(2)
            try:
                metric_samples.append(metric(b2, "follower_replication_throttled_rate"))
            except OSError:
                pass

    scraper = asyncio.create_task(scrape())
    samples = await sample_catch_up(cluster.by_id(2), "boot", target, timeout=120)
    scraper.cancel()
    measured = mean_rate(samples)
    assert 0.9 * rate <= measured <= 1.05 * rate, \
        f"{measured / MB:.2f} MB/s against {rate / MB} MB/s; every 2 s: {rate_profile(samples)}"
    # The broker's own gauge (Kafka's windowed rate, so it lags and smooths) tells the same story.
    steady = metric_samples[2:-1]
    assert steady, metric_samples
    assert abs(sum(steady) / len(steady) - rate) <= 0.2 * rate, (steady, measured)
    # The leaders throttled their side too.
    assert metric(cluster.by_id(0), "leader_replication_throttle_bytes_per_second") == rate
    for p in (0, 1):
        await wait_identical_replicas(cluster, "boot", p, [p % 2, 2])


async def test_live_rate_change_takes_effect_within_two_seconds(cluster: Cluster, zk_server) -> None:  # noqa: ANN001
    zk = zk_server.connect_string
    await stopped_follower_with_backlog(cluster, "live", 20, 60 * MB)
    target = log_bytes(cluster.by_id(0), "live") + log_bytes(cluster.by_id(1), "live")
    set_throttle(zk, "live", 2 * MB)
    b2 = cluster.by_id(2)
    b2.start()
    await asyncio.sleep(4)
    set_throttle_rate(zk, 8 * MB)
    changed = time.monotonic()
    seen: dict[int, float] = {}
    while len(seen) < 3 and time.monotonic() - changed < 5:
        for b in cluster.brokers:
            if b.broker_id not in seen:
                try:
                    if metric(b, "follower_replication_throttle_bytes_per_second") == 8 * MB:
                        seen[b.broker_id] = time.monotonic() - changed
                except (OSError, KeyError):
                    pass
        await asyncio.sleep(0.05)
    assert sorted(seen) == [0, 1, 2], seen
    assert max(seen.values()) <= 2.0, seen
    before = log_bytes(cluster.by_id(2), "live")
    await asyncio.sleep(4)
    after = log_bytes(cluster.by_id(2), "live")
    faster = (after - before) / 4
    assert faster > 4 * MB or after >= target, f"{faster / MB:.2f} MB/s after raising the rate to 8 MB/s"


async def test_kafka_4313_in_sync_throttled_partitions_stay_in_isr(cluster: Cluster, zk_server) -> None:  # noqa: ANN001
    await stopped_follower_with_backlog(cluster, "big", 10, 40 * MB)
    await cluster.create_topic("small", assignment={0: [0, 1], 1: [1, 0]})
    for p in (0, 1):
        await cluster.wait_isr("small", p, {0, 1})
    zk = zk_server.connect_string
    for topic in ("big", "small"):
        throttle_all_replicas(zk, topic)
    set_throttle_rate(zk, 2 * MB)
    cluster.by_id(2).start()
    # While broker 2 catches up under a tight quota, the low-volume in-sync partitions keep
    # replicating (unthrottled but counted), so they never leave the ISR.
    stop = time.monotonic() + 8
    while time.monotonic() < stop:
        await asyncio.to_thread(produce_bytes, cluster.bootstrap, "small", 2, 20_000, 100)
        for p in (0, 1):
            assert sorted((await cluster.state("small", p))["isr"]) == [0, 1]
        await asyncio.sleep(0.5)


async def test_config_written_while_zookeeper_restarts_is_applied_once(cluster: Cluster, zk_server) -> None:  # noqa: ANN001
    zk = zk_server.connect_string
    set_throttle_rate(zk, 3 * MB)
    await wait_rate_everywhere(cluster, 3 * MB)  # applied before ZooKeeper goes
    zk_server.stop()
    await asyncio.sleep(1.5)  # brokers are disconnected now
    zk_server.start()
    # Written right after the restart, before the brokers have necessarily reconnected.
    set_throttle_rate(zk, 7 * MB)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if all(metric(b, "leader_replication_throttle_bytes_per_second") == 7 * MB for b in cluster.brokers):
                break
        except (OSError, KeyError):
            pass
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the rate written during the restart never arrived")
    await cluster.zk.close()  # its session may have been disturbed too; reads below use the logs
    for b in cluster.brokers:
        applied = [ln for ln in b.log_path.read_text().splitlines() if "config.notification_applied" in ln]
        znodes = [ln.split("znode=")[1].split()[0] for ln in applied]
        assert len(znodes) == len(set(znodes)), f"broker {b.broker_id} applied a notification twice"


async def test_malformed_throttle_config_is_rejected_and_the_old_value_kept(cluster: Cluster, zk_server) -> None:  # noqa: ANN001
    zk = zk_server.connect_string
    set_throttle_rate(zk, 4 * MB)
    await wait_rate_everywhere(cluster, 4 * MB)
    # Straight into ZooKeeper, bypassing the CLI's validation, with a change notification.
    bad = {"version": 1, "config": {"leader.replication.throttled.rate": "fast",
                                    "follower.replication.throttled.rate": "-5"}}
    await cluster.zk.ensure_path("/config/brokers")
    await cluster.zk.set("/config/brokers/<default>", json.dumps(bad).encode())
    await cluster.zk.create("/config/changes/config_change_", json.dumps(
        {"version": 2, "entity_path": "brokers/<default>"}).encode(), sequential=True)
    await cluster.zk.create("/config/topics/t", json.dumps(
        {"version": 1, "config": {"leader.replication.throttled.replicas": "0:x,banana"}}).encode(), make_parents=True)
    await cluster.zk.create("/config/changes/config_change_", json.dumps(
        {"version": 2, "entity_path": "topics/t"}).encode(), sequential=True)

    def both_refused(b: BrokerProcess) -> bool:
        log = b.log_path.read_text()
        return "config.invalid_value" in log and "leader.replication.throttled.rate" in log \
            and "leader.replication.throttled.replicas" in log
    # Each broker has met both bad changes (and said so) before the checks below.
    await cluster.wait_for("both bad changes refused on every broker",
                           lambda: all(both_refused(b) for b in cluster.brokers), timeout=20)
    for b in cluster.brokers:
        assert b.proc.poll() is None
        assert metric(b, "leader_replication_throttle_bytes_per_second") == 4 * MB
        assert metric(b, "follower_replication_throttle_bytes_per_second") == 4 * MB
        log = b.log_path.read_text()
        assert "config.invalid_value" in log and "leader.replication.throttled.rate" in log
        assert "leader.replication.throttled.replicas" in log


async def test_catch_up_with_produce_traffic_follows_t_minus_inbound(cluster: Cluster, zk_server) -> None:  # noqa: ANN001
    rate, inbound = 5 * MB, 1 * MB
    await stopped_follower_with_backlog(cluster, "busy", 20, 60 * MB)
    set_throttle(zk_server.connect_string, "busy", rate)
    stop = asyncio.Event()

    cluster.by_id(2).start()
    # New data for the same (throttled, not in sync) partitions at `inbound` bytes/s.
    producer = asyncio.create_task(asyncio.to_thread(steady_producer, cluster.bootstrap, "busy", 20, inbound, stop))
    await asyncio.sleep(3)  # past the restart and the first window
    t0 = time.monotonic()
    got0 = log_bytes(cluster.by_id(2), "busy")
    lag0 = log_bytes(cluster.by_id(0), "busy") + log_bytes(cluster.by_id(1), "busy") - got0
    await asyncio.sleep(6)
    t1 = time.monotonic()
    got1 = log_bytes(cluster.by_id(2), "busy")
    lag1 = log_bytes(cluster.by_id(0), "busy") + log_bytes(cluster.by_id(1), "busy") - got1
    stop.set()
    await producer
    follower_rate = (got1 - got0) / (t1 - t0)
    catch_up = (lag0 - lag1) / (t1 - t0)
    # Everything the follower fetches for these partitions is throttled: new and old bytes
    # share T, so the backlog shrinks at T minus the inbound rate.
    assert 0.85 * rate <= follower_rate <= 1.05 * rate, f"{follower_rate / MB:.2f} MB/s"
    assert 0.7 * (rate - inbound) <= catch_up <= 1.1 * (rate - inbound), f"{catch_up / MB:.2f} MB/s"
