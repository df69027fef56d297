"""The /metrics exposition: the names scrapers rely on, and what prometheus_client must not change about them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import build_config
from broker.metrics import MAX_LABEL_CHARS, Registry, bounded, serve_metrics
from broker.server import Broker

# Every family a broker exposes, as scraped before the move to prometheus_client: a contract.
BROKER_FAMILIES = {
    ("isr_shrinks_total", "counter"),
    ("isr_expands_total", "counter"),
    ("under_replicated_partitions", "gauge"),
    ("partition_bytes_in_rate", "gauge"),
    ("log_size_bytes", "gauge"),
    ("log_end_offset", "gauge"),
    ("partitions", "gauge"),
    ("leader_partitions", "gauge"),
    ("requests_total", "counter"),
    ("request_latency_seconds", "histogram"),
    ("sum_replica_lag", "gauge"),
    ("leader_replication_throttled_rate", "gauge"),
    ("follower_replication_throttled_rate", "gauge"),
    ("leader_replication_throttle_bytes_per_second", "gauge"),
    ("follower_replication_throttle_bytes_per_second", "gauge"),
    ("client_byte_rate", "gauge"),
    ("client_throttle_time_ms", "gauge"),
    ("client_quota_bytes_per_second", "gauge"),
    ("controller_mutation_rate", "gauge"),
    ("controller_mutation_tokens", "gauge"),
    ("controller_mutation_throttle_time_ms", "gauge"),
    ("producer_ids", "gauge"),
    ("log_cleaner_bytes_read_total", "counter"),
    ("log_cleaner_bytes_written_total", "counter"),
    ("log_cleaner_max_dirty_ratio", "gauge"),
    ("log_cleaner_io_bytes_per_second", "gauge"),
    ("log_start_offset", "gauge"),
    ("log_segments", "gauge"),
    ("log_segments_deleted_total", "counter"),
    ("consumer_group_lag", "gauge"),
    ("consumer_group_members", "gauge"),
    ("consumer_group_state", "gauge"),
    ("group_rebalances_total", "counter"),
    ("authorization_denials_total", "counter"),
    ("authentication_failures_total", "counter"),  # SASL, {listener,mechanism}
}


def samples(text: str) -> dict[str, float]:
    """Sample lines as {series: value}, the way our tools and tests read them (split at the last space)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def test_a_broker_exposes_the_same_families_under_the_same_names(tmp_path: Path) -> None:
    cfg = build_config({"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": str(tmp_path),
                        "listeners": "PLAINTEXT://127.0.0.1:0"})
    text = Broker(cfg).metrics.render()
    types = {tuple(line.split()[2:4]) for line in text.splitlines() if line.startswith("# TYPE ")}
    helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    assert types == {("minibroker_" + name, kind) for name, kind in BROKER_FAMILIES}
    assert helps == {"minibroker_" + name for name, _ in BROKER_FAMILIES}


def test_counters_keep_their_total_name_and_have_no_created_sample() -> None:
    r = Registry()
    requests = r.counter("requests_total", "Requests handled, by API")
    shrinks = r.counter("isr_shrinks_total", "ISR shrinks")
    # Before the first increment: the family is announced, with no series (as before).
    assert "# TYPE minibroker_isr_shrinks_total counter" in r.render()
    assert samples(r.render()) == {}
    requests.inc(api="Produce")
    requests.inc(2, api="Produce")
    requests.inc(api="Fetch")
    shrinks.inc()
    text = r.render()
    assert "_created" not in text
    assert "# HELP minibroker_requests_total Requests handled, by API\n# TYPE minibroker_requests_total counter\n" in text
    assert samples(text) == {'minibroker_requests_total{api="Produce"}': 3.0,
                             'minibroker_requests_total{api="Fetch"}': 1.0,
                             "minibroker_isr_shrinks_total": 1.0}
    assert r.counter("requests_total", "again") is requests


def test_a_callback_gauge_is_read_at_scrape_time() -> None:
    r = Registry()
    partitions: dict[tuple[str, int], int] = {}
    r.gauge("log_end_offset", "Log end offset of each hosted partition",
            lambda: [({"topic": t, "partition": str(p)}, leo) for (t, p), leo in partitions.items()])
    r.gauge("leader_replication_throttle_bytes_per_second", "absent: unlimited", lambda: [])
    assert samples(r.render()) == {}
    partitions[("t", 0)] = 15
    partitions[("t", 1)] = 7
    text = r.render()
    assert samples(text) == {'minibroker_log_end_offset{partition="0",topic="t"}': 15.0,
                             'minibroker_log_end_offset{partition="1",topic="t"}': 7.0}
    # An empty callback still announces the family, as before.
    assert "# TYPE minibroker_leader_replication_throttle_bytes_per_second gauge\n" in text
    partitions[("t", 0)] = 16
    assert samples(r.render())['minibroker_log_end_offset{partition="0",topic="t"}'] == 16.0


def test_a_gauge_can_also_be_set_and_removed() -> None:
    r = Registry()
    g = r.gauge("partitions", "set by hand")
    g.set(5, topic="x")
    g.set(2, topic="y")
    g.remove(topic="x")
    assert samples(r.render()) == {'minibroker_partitions{topic="y"}': 2.0}


def test_client_id_labels_are_bounded_and_escaped() -> None:
    r = Registry()
    long_a, long_b = "a" * 1000, "a" * 999 + "b"
    odd = 'we"ird\\id\nwith{braces}=and,é'
    clients = [long_a, long_b, odd]
    r.gauge("client_byte_rate", "Bytes/s per client id and quota type",
            lambda: [({"client_id": c, "type": "produce"}, float(i)) for i, c in enumerate(clients)])
    r.counter("requests_total", "by API").inc(api="x" * 1000)
    r.histogram("request_latency_seconds", "by API").observe(0.1, api="y" * 1000)
    text = r.render()
    for line in text.splitlines():
        assert len(line) < 400, line[:100]
    # Bounded the same way as before: a prefix and a hash, so two long ids stay apart.
    assert bounded(long_a) != bounded(long_b) and len(bounded(long_a)) <= MAX_LABEL_CHARS
    assert f'minibroker_client_byte_rate{{client_id="{bounded(long_a)}",type="produce"}} 0.0' in text
    assert f'minibroker_client_byte_rate{{client_id="{bounded(long_b)}",type="produce"}} 1.0' in text
    assert f'minibroker_requests_total{{api="{bounded("x" * 1000)}"}} 1.0' in text
    assert f'minibroker_request_latency_seconds_count{{api="{bounded("y" * 1000)}"}} 1.0' in text
    # Quotes, backslashes and newlines escaped; everything else passed through as UTF-8.
    assert 'client_id="we\\"ird\\\\id\\nwith{braces}=and,é"' in text
    assert "\nwith{braces}" not in text


def test_the_histogram_keeps_its_buckets_and_le_spelling() -> None:
    r = Registry()
    h = r.histogram("request_latency_seconds", "Time from receipt to response, by API")
    assert "# TYPE minibroker_request_latency_seconds histogram" in r.render()
    assert "_bucket" not in r.render()
    for v in (0.0003, 0.002, 0.7, 45.0):
        h.observe(v, api="Produce")
    text = r.render()
    assert "_created" not in text
    got = samples(text)
    bucket = 'minibroker_request_latency_seconds_bucket{{api="Produce",le="{}"}}'
    les = ["0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
           "1", "2.5", "5", "10", "30", "+Inf"]
    counts = [1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4]
    assert {bucket.format(le): float(n) for le, n in zip(les, counts, strict=True)} == \
        {k: v for k, v in got.items() if "_bucket" in k}
    assert got['minibroker_request_latency_seconds_count{api="Produce"}'] == 4.0
    assert abs(got['minibroker_request_latency_seconds_sum{api="Produce"}'] - 45.7023) < 1e-9
    # Buckets in order, then count and sum, as before.
    lines = [line.split("{")[0] for line in text.splitlines() if not line.startswith("#")]
    assert lines[-2:] == ["minibroker_request_latency_seconds_count", "minibroker_request_latency_seconds_sum"]


async def test_the_endpoint_serves_the_exposition_from_the_loop() -> None:
    r = Registry()
    r.counter("requests_total", "by API").inc(api="Metadata")
    server = await serve_metrics(r, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def get(path: str) -> tuple[bytes, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        response = await reader.read()
        writer.close()
        head, _, body = response.partition(b"\r\n\r\n")
        return head, body

    try:
        head, body = await get("/metrics?x=1")
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"\r\nContent-Type: text/plain; version=" in head
        assert body.decode() == r.render()
        assert b'minibroker_requests_total{api="Metadata"} 1.0' in body
        head, _ = await get("/other")
        assert head.startswith(b"HTTP/1.1 404")
    finally:
        server.close()
        await server.wait_closed()


def test_label_names_are_fixed_by_the_first_use() -> None:
    r = Registry()
    c = r.counter("requests_total", "by API")
    c.inc(api="Produce", version="1")
    c.inc(version="1", api="Produce")  # the same series, whatever the keyword order
    assert samples(r.render()) == {'minibroker_requests_total{api="Produce",version="1"}': 2.0}
    with pytest.raises(ValueError):
        c.inc(api="Fetch")


def test_a_callback_counter_keeps_its_total_name() -> None:
    r = Registry()
    generations = {"g1": 3}
    r.counter_fn("group_rebalances_total", "Rebalances per group",
                 lambda: [({"group": g}, n) for g, n in generations.items()])
    text = r.render()
    assert "# TYPE minibroker_group_rebalances_total counter\n" in text
    assert "_created" not in text
    assert samples(text) == {'minibroker_group_rebalances_total{group="g1"}': 3.0}
    generations.clear()
    assert samples(r.render()) == {}
    assert "# TYPE minibroker_group_rebalances_total counter\n" in r.render()


def test_an_idle_client_ids_quota_series_go_with_its_sensors() -> None:
    # The client-id series are read from the quota sensors at scrape time: once a one-off
    # client id's sensors expire (no quota configured: after the quota window), its series go.
    from broker.broker_metrics import register_quota_gauges
    from quotas.client import ClientQuotaManager
    from quotas.controller_mutation import ControllerMutationQuotaManager

    now = [86_400_000.0]
    produce, fetch, mutation = ClientQuotaManager("produce"), ClientQuotaManager("fetch"), ControllerMutationQuotaManager()
    r = Registry()
    register_quota_gauges(r, produce, fetch, mutation, lambda: now[0])
    produce.record("one-off", 500, now[0])
    fetch.record_only("one-off", 500, now[0])
    mutation.permissive("one-off", 3, now[0])
    text = r.render()
    for family in ("client_byte_rate", "client_throttle_time_ms", "controller_mutation_rate"):
        assert f'minibroker_{family}{{client_id="one-off"' in text
    now[0] += 11_001  # past the quota window of 11 samples of 1 s
    produce.record("steady", 1, now[0])
    fetch.record_only("steady", 1, now[0])
    mutation.permissive("steady", 1, now[0])
    text = r.render()
    assert 'client_id="one-off"' not in text
    for family in ("client_byte_rate", "client_throttle_time_ms", "controller_mutation_rate"):
        assert f'minibroker_{family}{{client_id="steady"' in text
