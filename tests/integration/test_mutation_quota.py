"""KIP-599 controller mutation quotas on a real three-broker cluster, with real admin clients.

A rate of 5 partitions/s gives a bucket of 55 (controller.quota.window.num 11 x 1 s x 5).
Strict mode (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) admits a topic while
the tokens are not below zero and takes its whole partition count, so 60 topics of 4
partitions in one request admit 14 (55 - 56 = -1) and reject 46 with a throttle of
1 / 5 s = 200 ms (less the refill while the request is handled). Older versions are
permissive: all topics go through and the connection is paused for the throttle.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from fetcher.connection import KafkaConnection
from tests.brokers import ROOT
from tests.cluster import Cluster, configs, metric

pytestmark = pytest.mark.integration

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
THROTTLED = 89


def set_rate(cluster: Cluster, client: str, rate: float) -> None:
    zk = cluster.brokers[0].zk_connect
    r = configs(zk, "--entity-type", "clients", "--entity-name", client, "--alter", "--add-config",
                f"controller_mutation_rate={rate}")
    assert r.returncode == 0, r.stderr


async def controller_conn(cluster: Cluster, client_id: str) -> KafkaConnection:
    b = cluster.by_id(await cluster.controller())
    return await KafkaConnection.open("127.0.0.1", b.port, client_id=client_id)


def topic_body(names: list[str], partitions: int = 4, validate_only: bool = False) -> dict:
    return {"topics": [{"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []} for n in names], "timeout_ms": 0, "validate_only": validate_only}


async def wait_applied(conn: KafkaConnection, version: int = 6) -> None:
    """Until a probe request sees the quota (a throttled probe: the new rate is in force)."""
    deadline = time.monotonic() + 10
    while True:
        # validate_only is never counted; a real 1-partition topic probes the bucket.
        name = f"probe-{time.monotonic_ns()}"
        resp = await conn.request(CREATE_TOPICS, version, topic_body([name], 1), 30)
        if resp["throttle_time_ms"] > 0 or resp["topics"][0]["error_code"] == THROTTLED:
            return
        assert time.monotonic() < deadline, "controller_mutation_rate never applied"
        await asyncio.sleep(0.1)


async def test_strict_burst_is_admitted_and_refused_per_topic_as_the_bucket_predicts(cluster: Cluster) -> None:
    set_rate(cluster, "strict-admin", 5)
    await asyncio.sleep(1.5)  # the notification reaches every broker well within this
    names = [f"burst-{i:02d}" for i in range(60)]
    async with await controller_conn(cluster, "strict-admin") as conn:
        t0 = time.monotonic()
        resp = await conn.request(CREATE_TOPICS, 6, topic_body(names), 60)
        took = time.monotonic() - t0
        codes = [t["error_code"] for t in resp["topics"]]
        admitted = codes.index(THROTTLED)
        # Topics are taken in request order: the admitted ones are a prefix, the rest refused.
        assert codes == [0] * admitted + [THROTTLED] * (60 - admitted), codes
        # 55 - 14 * 4 = -1: the 15th topic meets a negative bucket, unless the refill while the
        # first 14 were written (5 tokens/s) lifted it back to zero, which needs 200 ms.
        assert admitted == 14 or (admitted == 15 and took * 5 >= 1), (admitted, took)
        throttle = resp["throttle_time_ms"]
        assert 0 < throttle <= round((4 * admitted - 55) / 5 * 1000), throttle
        assert all(t["error_message"] for t in resp["topics"][admitted:])
        # The client's retry, each time after the throttle it was given, gets them all in.
        pending = names[admitted:]
        deadline = time.monotonic() + 90
        while pending:
            assert time.monotonic() < deadline, f"still throttled: {len(pending)}"
            await asyncio.sleep(throttle / 1000)
            resp = await conn.request(CREATE_TOPICS, 6, topic_body(pending), 60)
            assert all(t["error_code"] in (0, THROTTLED) for t in resp["topics"]), resp
            pending = [t["name"] for t in resp["topics"] if t["error_code"] == THROTTLED]
            throttle = max(resp["throttle_time_ms"], 1)
    controller = cluster.by_id(await cluster.controller())
    assert metric(controller, "controller_mutation_rate", client_id="strict-admin") > 0
    assert metric(controller, "controller_mutation_throttle_time_ms", client_id="strict-admin") > 0


async def test_kafka_python_admin_burst_and_retry(cluster: Cluster) -> None:
    # kafka-python 3.0.12 sends CreateTopics v6 here (its own maximum capped by this broker's
    # table), so it meets strict mode and sees THROTTLING_QUOTA_EXCEEDED per topic.
    from kafka.admin import KafkaAdminClient

    set_rate(cluster, "kp-admin", 5)
    await asyncio.sleep(1.5)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="kp-admin", request_timeout_ms=60000)
    try:
        names = [f"kp-{i:02d}" for i in range(60)]
        spec = {"num_partitions": 4, "replication_factor": 1}
        t0 = time.monotonic()
        resp = await asyncio.to_thread(admin.create_topics, {n: spec for n in names}, raise_errors=False)
        took = time.monotonic() - t0
        codes = [t["error_code"] for t in resp["topics"]]
        admitted = codes.index(THROTTLED)
        assert codes == [0] * admitted + [THROTTLED] * (60 - admitted), codes
        assert admitted == 14 or (admitted == 15 and took * 5 >= 1), (admitted, took)
        pending = names[admitted:]
        deadline = time.monotonic() + 90
        while pending:  # the client retries after the throttle (about 200 ms per refused round)
            assert time.monotonic() < deadline, f"still throttled: {len(pending)}"
            await asyncio.sleep(0.2)
            resp = await asyncio.to_thread(admin.create_topics, {n: spec for n in pending}, raise_errors=False)
            assert all(t["error_code"] in (0, THROTTLED) for t in resp["topics"]), resp
            pending = [t["name"] for t in resp["topics"] if t["error_code"] == THROTTLED]
        assert set(names) <= set(await asyncio.to_thread(admin.list_topics))
    finally:
        admin.close()


async def test_confluent_admin_old_versions_permissive_validate_only_and_isolation(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    set_rate(cluster, "cf-admin", 5)
    set_rate(cluster, "old-client", 5)
    await asyncio.sleep(1.5)
    # librdkafka 2.16 sends CreateTopics v4: permissive. Every topic is created, no errors.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "client.id": "cf-admin"})
    futures = admin.create_topics([NewTopic(f"cf-{i:02d}", 4, 1) for i in range(30)], operation_timeout=30)
    for f in futures.values():
        await asyncio.to_thread(f.result, 60)
    controller = cluster.by_id(await cluster.controller())
    assert metric(controller, "controller_mutation_tokens", client_id="cf-admin") < 0

    # Our own client on old versions: accepted, throttle_time_ms given, connection paused.
    async with await controller_conn(cluster, "old-client") as conn:
        resp = await conn.request(CREATE_TOPICS, 2, topic_body([f"old-{i}" for i in range(20)]), 60)
        assert [t["error_code"] for t in resp["topics"]] == [0] * 20
        throttle = resp["throttle_time_ms"]
        assert throttle == pytest.approx((80 - 55) / 5 * 1000, abs=400)
        t0 = time.monotonic()
        resp = await conn.request(DELETE_TOPICS, 1, {"topic_names": ["old-0"], "timeout_ms": 0}, 60)
        assert time.monotonic() - t0 >= throttle / 1000 * 0.8  # not read until the pause was over
        assert resp["responses"][0]["error_code"] == 0 and resp["throttle_time_ms"] > 0

        # ValidateOnly is never counted, however much it asks for.
        before = metric(controller, "controller_mutation_tokens", client_id="old-client")
        for _ in range(5):
            resp = await conn.request(CREATE_TOPICS, 6, topic_body([f"v-{i}" for i in range(50)], 100, True), 60)
            assert {t["error_code"] for t in resp["topics"]} == {0}
        after = metric(controller, "controller_mutation_tokens", client_id="old-client")
        assert after >= before  # refilled a little, never spent

    # Isolation: another client id has its own bucket (here: no quota at all).
    async with await controller_conn(cluster, "other-client") as conn:
        resp = await conn.request(CREATE_TOPICS, 6, topic_body([f"iso-{i}" for i in range(20)]), 60)
        assert [t["error_code"] for t in resp["topics"]] == [0] * 20 and resp["throttle_time_ms"] == 0
    # CreatePartitions v3 is strict too: cf-admin's bucket is still far below zero.
    async with await controller_conn(cluster, "cf-admin") as conn:
        resp = await conn.request(CREATE_PARTITIONS, 3, {"topics": [{"name": "cf-00", "count": 8, "assignments": None}],
                                                         "timeout_ms": 0, "validate_only": False}, 60)
        assert resp["results"][0]["error_code"] == THROTTLED and resp["throttle_time_ms"] > 0


async def test_topics_tool_reports_and_retries(cluster: Cluster) -> None:
    set_rate(cluster, "minibroker-tool", 2)
    await asyncio.sleep(1.5)

    def topics(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "broker", "topics", "--bootstrap-server", cluster.bootstrap,
                               *args], cwd=str(ROOT), capture_output=True, text=True, timeout=90)

    # Bucket 22: one 30-partition topic drives it to -8 (4 s of throttle).
    r = await asyncio.to_thread(topics, "--create", "--topic", "big", "--partitions", "30", "--replication-factor", "1")
    assert r.returncode == 0, r.stderr
    r = await asyncio.to_thread(topics, "--create", "--topic", "next", "--partitions", "1", "--replication-factor", "1")
    assert r.returncode != 0
    assert "THROTTLING_QUOTA_EXCEEDED" in r.stderr and "throttle_time_ms=" in r.stderr
    r = await asyncio.to_thread(topics, "--create", "--topic", "next", "--partitions", "1", "--replication-factor", "1",
                                "--retry-on-quota-violation")
    assert r.returncode == 0, r.stderr
    assert "Created topic next." in r.stdout


async def test_bad_topics_get_their_own_codes_and_cost_nothing(cluster: Cluster) -> None:
    set_rate(cluster, "bad-input", 1)
    await asyncio.sleep(1.5)
    async with await controller_conn(cluster, "bad-input") as conn:
        body = {"topics": [
            {"name": "bad name!", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": "x" * 250, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": "zero", "num_partitions": 0, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": "negative", "num_partitions": -5, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": "too-many-replicas", "num_partitions": 1, "replication_factor": 4, "assignments": [],
             "configs": []},
            {"name": "twice", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": "twice", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": "fine", "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": []},
        ], "timeout_ms": 10000, "validate_only": False}
        resp = await conn.request(CREATE_TOPICS, 6, body, 60)
        codes = {(t["name"][:20]): t["error_code"] for t in resp["topics"]}
        assert codes == {"bad name!": 17, "x" * 20: 17, "zero": 37, "negative": 37, "too-many-replicas": 38,
                         "twice": 42, "fine": 0}, codes
        controller = cluster.by_id(await cluster.controller())
        # Only "fine" was counted: 11 - 3 = 8 tokens left (plus refill, capped at the burst).
        assert 8 <= metric(controller, "controller_mutation_tokens", client_id="bad-input") <= 11


async def test_controller_elects_leaders_promptly_during_a_mutation_storm(cluster: Cluster) -> None:
    set_rate(cluster, "storm", 5)
    await asyncio.sleep(1.5)
    controller = await cluster.controller()
    victim = next(b for b in cluster.brokers if b.broker_id != controller)
    survivor = next(b for b in cluster.brokers if b.broker_id not in (controller, victim.broker_id))
    async with await KafkaConnection.open("127.0.0.1", survivor.port) as conn:
        resp = await conn.request(CREATE_TOPICS, 1, {"topics": [{
            "name": "led", "num_partitions": -1, "replication_factor": -1, "configs": [],
            "assignments": [{"partition_index": p, "broker_ids": [victim.broker_id, survivor.broker_id]}
                            for p in range(6)]}], "timeout_ms": 30000}, 60)
    assert resp["topics"][0]["error_code"] == 0
    for p in range(6):
        await cluster.wait_isr("led", p, {victim.broker_id, survivor.broker_id})

    stop = asyncio.Event()
    done = {"creates": 0, "throttled": 0}

    async def storm() -> None:
        conn = await KafkaConnection.open("127.0.0.1", cluster.by_id(controller).port, client_id="storm")
        try:
            i = 0
            while not stop.is_set():
                names = [f"storm-{i}-{j}" for j in range(5)]
                i += 1
                resp = await conn.request(CREATE_TOPICS, 6, topic_body(names, 2), 60)
                done["creates"] += sum(1 for t in resp["topics"] if t["error_code"] == 0)
                done["throttled"] += sum(1 for t in resp["topics"] if t["error_code"] == THROTTLED)
                await conn.request(DELETE_TOPICS, 5, {"topic_names": names, "timeout_ms": 0}, 60)
        finally:
            await conn.close()

    task = asyncio.create_task(storm())
    try:
        await asyncio.sleep(3)
        victim.kill()
        killed = time.monotonic()

        async def moved() -> bool:
            for p in range(6):
                st = await cluster.state("led", p)
                if st["leader"] != survivor.broker_id:
                    return False
            return True

        await cluster.wait_for("leaders moved off the killed broker", moved, timeout=30, interval=0.05)
        elapsed = time.monotonic() - killed
    finally:
        stop.set()
        await task
    print(f"leader election after kill -9 during a mutation storm: {elapsed:.2f} s "
          f"({done['creates']} topics created, {done['throttled']} refused meanwhile)")
    assert done["throttled"] > 0  # the storm really was held by its quota
    assert elapsed <= 6.0 + 2.0  # zookeeper.session.timeout.ms + 2 s
