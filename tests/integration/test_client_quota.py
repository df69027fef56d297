"""KIP-13 client byte-rate quotas on a real broker, with real clients, set through ZooKeeper.

Rates here are scaled to this 2-core machine (hundreds of KB/s rather than MB/s) so that a
throttled client and an unthrottled one can run side by side with room to spare. Rates are
measured from what the broker really took in (log growth) or what the client really got.

Kafka's Rate enforces the quota over its window (quota.window.num x size = 11 s, a young
history padded to 10 s): a client offering 3x its quota sends ten seconds of quota at once,
is then held until that burst ages out of the window, and the pattern recurs with the
window's period. Averages over whole windows are therefore exact while an arbitrary 20 s
span can sit anywhere from about 0.8 to 1.1 of the quota (see quotas/client.py). The
steady state is measured over 22 s (two windows) after the first burst; the clients use
the Java client's 16 KB batches, since 1 MB requests would each be 3 s of quota.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.records.message_set import build_message_set
from tests.support.brokers import BrokerProcess
from tests.support.metrics import metric, scrape
from tests.support.replication import log_bytes
from tests.support.tools import configs
from tests.support.topics import create_topic
from tests.support.traffic import consume_for, paced_producer, produce_bytes

pytestmark = pytest.mark.integration

KB = 1000


@pytest.fixture
def quota_broker(broker_factory) -> BrokerProcess:  # noqa: ANN001
    return broker_factory(0, metrics=True, num_partitions="1")


def set_client(zk: str, *args: str) -> None:
    r = configs(zk, "--entity-type", "clients", *args)
    assert r.returncode == 0, r.stderr


async def wait_quota(b: BrokerProcess, client_id: str, kind: str, value: float, timeout: float = 10) -> None:
    """Until the broker reports `value` as the quota in force for this (already seen) client."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if metric(b, "client_quota_bytes_per_second", client_id=client_id, type=kind) == value:
                return
        except KeyError:
            pass
        assert time.monotonic() < deadline, f"quota {value} for {client_id} not applied"
        await asyncio.sleep(0.1)


def produce_request(topic: str, value_size: int, count: int) -> dict:
    data = build_message_set([(None, b"q" * value_size, 0) for _ in range(count)], magic=1)
    return {"acks": 1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": data}]}]}


async def own_produce(conn: KafkaConnection, topic: str, value_size: int = 1000, count: int = 100) -> dict:
    return await conn.request(ApiKey.PRODUCE, 2, produce_request(topic, value_size, count), 60)


async def sample_growth(b: BrokerProcess, topics: list[str], start_after: float, span: float) -> dict[str, float]:
    """Bytes/s each topic's log grew over [start_after, start_after + span] from now."""
    await asyncio.sleep(start_after)
    first = {t: log_bytes(b, t) for t in topics}
    await asyncio.sleep(span)
    return {t: (log_bytes(b, t) - first[t]) / span for t in topics}


async def test_produce_quota_holds_the_client_and_spares_the_other(quota_broker: BrokerProcess) -> None:
    b = quota_broker
    quota = 300 * KB
    set_client(b.zk_connect, "--entity-name", "slow-producer", "--alter", "--add-config",
               f"producer_byte_rate={quota}")
    for t in ("slow", "fast"):
        r = await create_topic(b, t, check=False)
        assert r["error_code"] == 0
    stop = threading.Event()
    # 3x its quota for the slow client; the fast one (no quota) offers the same 900 KB/s.
    jobs = [asyncio.to_thread(paced_producer, b.bootstrap, "slow-producer", "slow", 3 * quota, 30, stop),
            asyncio.to_thread(paced_producer, b.bootstrap, "fast-producer", "fast", 3 * quota, 30, stop)]
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        # The first seconds (a full pacing bucket, connection set-up) are left out; the steady
        # state is measured over the 22 s after them.
        rates = await sample_growth(b, ["slow", "fast"], 6, 22)
        assert metric(b, "client_throttle_time_ms", client_id="slow-producer", type="produce") > 0
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    # The log holds the requests' record sets byte for byte (only headers are not stored).
    assert 0.9 * quota <= rates["slow"] <= 1.1 * quota, rates
    assert rates["fast"] >= 0.9 * 3 * quota, rates

    # Our own protocol client under the same id: the responses say how long they were held.
    async with await KafkaConnection.open("127.0.0.1", b.port, client_id="slow-producer") as conn:
        throttles = []
        for _ in range(5):
            t0 = time.monotonic()
            resp = await own_produce(conn, "slow", 1000, 200)
            held = time.monotonic() - t0
            throttle = resp["throttle_time_ms"]
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
            throttles.append(throttle)
            if throttle:
                assert held >= throttle / 1000 * 0.9  # the response really waited that long
    # The client is still over its quota when this starts; once the window has forgiven it,
    # the responses come back unheld.
    assert throttles[0] > 0, throttles


def rate_between(marks: list[tuple[float, int]], t0: float, t1: float) -> float:
    a = max((m for m in marks if m[0] <= t0), default=marks[0])
    z = max((m for m in marks if m[0] <= t1), default=marks[-1])
    return (z[1] - a[1]) / (z[0] - a[0])


async def test_fetch_quota_holds_the_consumer_and_spares_the_other(quota_broker: BrokerProcess) -> None:
    b = quota_broker
    quota = 300 * KB
    assert (await create_topic(b, "data", check=False))["error_code"] == 0
    await asyncio.to_thread(produce_bytes, b.bootstrap, "data", 1, 12_000_000)
    set_client(b.zk_connect, "--entity-name", "slow-consumer", "--alter", "--add-config",
               f"consumer_byte_rate={quota}")
    slow: list[tuple[float, int]] = []
    fast: list[tuple[float, int]] = []
    await asyncio.gather(asyncio.to_thread(consume_for, b.bootstrap, "slow-consumer", "data", 29, slow),
                         asyncio.to_thread(consume_for, b.bootstrap, "fast-consumer", "data", 8, fast))
    steady = rate_between(slow, 6, 28)  # message values; the quota also counts ~4% framing
    assert 0.9 * quota <= steady * 1.04 <= 1.1 * quota, steady
    # The unthrottled consumer read the whole topic meanwhile.
    assert fast[-1][1] == 12_000_000
    assert metric(b, "client_throttle_time_ms", client_id="slow-consumer", type="fetch") > 0
    assert metric(b, "client_byte_rate", client_id="slow-consumer", type="fetch") > 0

    # Fetch v3 responses carry the delay they were given.
    host, port = "127.0.0.1", b.port
    async with await KafkaConnection.open(host, port, client_id="slow-consumer") as conn:
        throttles = []
        for _ in range(4):
            resp = await conn.request(ApiKey.FETCH, 3, {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1,
                                             "max_bytes": 1_000_000, "topics": [{"topic": "data", "partitions": [
                                                 {"partition": 0, "fetch_offset": 0,
                                                  "partition_max_bytes": 1_000_000}]}]}, 60)
            throttles.append(resp["throttle_time_ms"])
    assert any(t > 0 for t in throttles), throttles


async def test_live_override_applies_within_two_seconds(quota_broker: BrokerProcess) -> None:
    b = quota_broker
    assert (await create_topic(b, "live", check=False))["error_code"] == 0
    async with await KafkaConnection.open("127.0.0.1", b.port, client_id="live-client") as conn:
        for _ in range(20):  # about 2 MB, unthrottled
            assert (await own_produce(conn, "live"))["throttle_time_ms"] == 0
        # About 200 KB/s over the padded 10 s window: 150 KB/s holds it a few seconds.
        await asyncio.to_thread(set_client, b.zk_connect, "--entity-name", "live-client", "--alter",
                                "--add-config", "producer_byte_rate=150000")
        written = time.monotonic()
        while True:
            sent = time.monotonic()
            resp = await own_produce(conn, "live", 1000, 10)
            if resp["throttle_time_ms"] > 0:
                break
            assert sent - written < 10, "override never applied"
        assert sent - written <= 2.0, sent - written
    await wait_quota(b, "live-client", "produce", 150000)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_two_hundred_throttled_producers_keep_memory_bounded(quota_broker: BrokerProcess) -> None:
    b = quota_broker
    assert (await create_topic(b, "many", check=False))["error_code"] == 0
    set_client(b.zk_connect, "--entity-default", "--alter", "--add-config", "producer_byte_rate=20000")
    assert b.proc is not None
    before = rss_kb(b.proc.pid)
    conns = [await KafkaConnection.open("127.0.0.1", b.port, client_id=f"many-{i}") for i in range(200)]
    throttled = 0
    peak = before
    stop = time.monotonic() + 12

    async def run(conn: KafkaConnection) -> None:
        nonlocal throttled
        while time.monotonic() < stop:
            # 200 KB per request: each client is over its 20 KB/s after one request.
            resp = await own_produce(conn, "many", 1000, 200)
            if resp["throttle_time_ms"] > 0:
                throttled += 1

    async def watch() -> None:
        nonlocal peak
        while time.monotonic() < stop + 1:
            peak = max(peak, rss_kb(b.proc.pid))
            await asyncio.sleep(0.2)

    try:
        await asyncio.gather(watch(), *(run(c) for c in conns))
    finally:
        for c in conns:
            await c.close()
    growth_mb = (peak - before) / 1024
    print(f"broker RSS before {before / 1024:.0f} MB, peak {peak / 1024:.0f} MB with 200 throttled producers")
    assert throttled >= 200  # every client was held at least once
    # Each held client costs a small response and its socket buffers, not its requests.
    assert growth_mb < 150, growth_mb


async def test_bad_quota_values_are_refused_and_odd_client_ids_are_safe(quota_broker: BrokerProcess) -> None:
    from broker.zk.client import ZkClient

    b = quota_broker
    assert (await create_topic(b, "odd", check=False))["error_code"] == 0
    async with await KafkaConnection.open("127.0.0.1", b.port, client_id="victim") as conn:
        await own_produce(conn, "odd", 100, 1)
    set_client(b.zk_connect, "--entity-name", "victim", "--alter", "--add-config", "producer_byte_rate=70000")
    await wait_quota(b, "victim", "produce", 70000)
    # The configs tool refuses bad values itself; write them as another tool might.
    r = configs(b.zk_connect, "--entity-type", "clients", "--entity-name", "victim", "--alter",
                "--add-config", "producer_byte_rate=-5")
    assert r.returncode != 0 and "producer_byte_rate" in r.stderr
    zk = ZkClient(b.zk_connect, 6000)
    await zk.start()
    try:
        for bad in ("fast", "-5"):
            await zk.set("/config/clients/victim", json.dumps(
                {"version": 1, "config": {"producer_byte_rate": bad}}).encode())
            await zk.create("/config/changes/config_change_",
                            json.dumps({"version": 2, "entity_path": "clients/victim"}).encode(), sequential=True)
        await asyncio.sleep(1.5)
    finally:
        await zk.close()
    await wait_quota(b, "victim", "produce", 70000)
    assert "config.invalid_value" in b.log() and "producer_byte_rate" in b.log()

    odd_ids = ["x" * 1000, 'we"ird\\id\nwith{braces}=and,é', "with/slash"]
    for cid in odd_ids:
        async with await KafkaConnection.open("127.0.0.1", b.port, client_id=cid) as conn:
            resp = await own_produce(conn, "odd", 100, 1)
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
    set_client(b.zk_connect, "--entity-name", "with/slash", "--alter", "--add-config", "producer_byte_rate=60000")
    await wait_quota(b, "with/slash", "produce", 60000)
    text = scrape(b)
    for line in text.splitlines():
        if line.startswith("minibroker_client_byte_rate{"):
            assert len(line) < 400, line[:100]
    assert 'client_id="we\\"ird\\\\id\\nwith{braces}=and,é"' in text
    assert os.kill(b.proc.pid, 0) is None  # still serving
