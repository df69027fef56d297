"""Idempotent producers on three real brokers while the partition leader is killed with kill -9, twice.

confluent-kafka with `enable.idempotence=true` and kafka-python 3.x (idempotent by default)
produce 100,000 messages each over three partitions (RF=3, min.insync.replicas=2). The leader
of partition 0 is killed, restarted once back, and the new leader is killed in turn. Read back,
every partition holds exactly the values sent to it, in the order they were sent: no duplicate,
no gap, nothing acknowledged lost, each acknowledged record at its acknowledged offset.

A transactional producer is refused at once with a fatal error, never left to hang.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.support.cluster import Cluster
from tests.support.metrics import metric
from tests.support.traffic import produce_one, read_partition

pytestmark = pytest.mark.integration
N = 100_000
PARTITIONS = 3


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], sent: list[int]) -> list[tuple[int, int, bytes]]:
    acked: list[tuple[int, int, bytes]] = []
    failures: list[str] = []

    def report(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            failures.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 180_000, "retry.backoff.ms": 100})
    for i, v in enumerate(values):
        produce_one(p, topic, v, partition=i % PARTITIONS, on_delivery=report)
        sent[0] = i + 1
        p.poll(0)
    assert p.flush(180) == 0
    assert failures == [], failures[:5]
    return acked


def kafka_python_produce(bootstrap: str, topic: str, values: list[bytes], sent: list[int]) -> list[tuple[int, int, bytes]]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, request_timeout_ms=10_000,
                      delivery_timeout_ms=180_000, retry_backoff_ms=100)  # idempotence: the 3.x default
    try:
        assert p.config["enable_idempotence"], "kafka-python did not enable idempotence"
        futures = []
        for i, v in enumerate(values):
            futures.append((v, p.send(topic, v, partition=i % PARTITIONS)))
            sent[0] = i + 1
        p.flush(180)
        acked = []
        for v, f in futures:
            md = f.get(timeout=1)
            acked.append((md.partition, md.offset, v))
        return acked
    finally:
        p.close(10)


async def leader(cluster: Cluster, topic: str, not_: int | None = None) -> int:
    async def check() -> tuple[int] | None:  # a tuple: broker 0 is a leader too
        st = await cluster.state(topic, 0)
        return (st["leader"],) if st["leader"] not in (-1, not_) and len(st["isr"]) >= 2 else None
    return int((await cluster.wait_for(f"a leader of {topic}-0", check, timeout=60))[0])


async def kill_leader_twice(cluster: Cluster, topic: str, sent: list[int], done: threading.Event) -> list[int]:
    """Kill -9 partition 0's leader once N/5 messages are handed over, restart it, then kill the next leader."""
    killed = []
    for threshold in (N // 5, N // 2):
        while sent[0] < threshold and not done.is_set():
            await asyncio.sleep(0.05)
        old = await leader(cluster, topic)
        cluster.by_id(old).kill()
        killed.append(old)
        await leader(cluster, topic, not_=old)
        # Back in the ISR before the next kill, so min.insync.replicas=2 holds.
        await asyncio.to_thread(cluster.by_id(old).start)
        await cluster.wait_isr(topic, 0, {0, 1, 2}, timeout=90)
    return killed


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
async def test_idempotent_producer_survives_two_leader_kills(cluster: Cluster, client: str) -> None:
    topic = f"idem-{client}"
    await cluster.create_topic(topic, PARTITIONS, 3, configs={"min.insync.replicas": "2"})
    for p in range(PARTITIONS):
        await cluster.wait_isr(topic, p, {0, 1, 2})
    values = [b"%s-%06d" % (client.encode(), i) for i in range(N)]
    produce: Callable[..., list[tuple[int, int, bytes]]] = (
        confluent_produce if client == "confluent-kafka" else kafka_python_produce)
    sent = [0]
    done = threading.Event()
    killer = asyncio.create_task(kill_leader_twice(cluster, topic, sent, done))
    try:
        acked = await asyncio.to_thread(produce, cluster.bootstrap, topic, values, sent)
    except BaseException:
        killer.cancel()
        raise
    finally:
        done.set()
    killed = await killer
    assert len(killed) == 2

    assert len(acked) == N
    for p in range(PARTITIONS):
        expected = values[p::PARTITIONS]
        got = await asyncio.to_thread(read_partition, cluster.bootstrap, topic, p, len(expected))
        offsets = [o for o, _ in got]
        assert offsets == list(range(len(got))), f"partition {p}: offsets not contiguous from 0"
        read = [v for _, v in got]
        dupes = len(read) - len(set(read))
        assert dupes == 0, f"partition {p}: {dupes} duplicates"
        missing = set(expected) - set(read)
        assert not missing, f"partition {p}: {len(missing)} acknowledged values missing, e.g. {sorted(missing)[:3]}"
        assert read == expected, f"partition {p}: values out of order"
        at = dict(got)
        wrong = [(o, v) for q, o, v in acked if q == p and at.get(o) != v]
        assert not wrong, f"partition {p}: {len(wrong)} acknowledged records not at their offset, {wrong[:3]}"
    # Every replica of partition 0 tracks the producer (followers from the replicated batches).
    for b in cluster.brokers:
        assert metric(b, "producer_ids", topic=topic, partition="0") >= 1


async def test_transactional_producer_gets_a_fatal_error_at_once(cluster: Cluster) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-refused"})
    with pytest.raises(KafkaException) as e:
        await asyncio.to_thread(p.init_transactions, 60)
    err: KafkaError = e.value.args[0]
    # Refused, not timed out: a fatal error (no FindCoordinator for transactions, or
    # TRANSACTIONAL_ID_AUTHORIZATION_FAILED from InitProducerId), reported by the client.
    assert err.fatal() and err.code() != KafkaError._TIMED_OUT, err

    # kafka-python: refused too, with an error naming what is missing, not a timeout.
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    def kafka_python_init() -> None:
        kp = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="tx-refused-2", max_block_ms=60_000)
        try:
            kp.init_transactions()
        finally:
            kp.close(5)

    with pytest.raises(Exception) as kp_err:  # noqa: PT011 - any error but a timeout
        await asyncio.to_thread(kafka_python_init)
    assert not isinstance(kp_err.value, KafkaTimeoutError), kp_err.value
