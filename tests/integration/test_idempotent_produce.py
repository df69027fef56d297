"""The idempotent producer on the wire, one real broker: InitProducerId, then Produce with v2 batches
carrying a producer id, retried, out of order and fenced, across a clean restart and a kill -9.

Batches are built with kafka-python's DefaultRecordBatchBuilder (an implementation independent of
this project's) and sent as a producer sends them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.replication.replica_manager import INLINE_APPEND_BYTES
from broker.zk import layout as L
from broker.zk.server import ZooKeeperServer
from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.integration
PRODUCE_VERSION = 8  # Kafka 2.8's producer sends v8 (classic encoding, with log_start_offset and record errors)


def batch(pid: int, epoch: int, seq: int, count: int, tag: str) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i in range(count):
        b.append(i, timestamp=None, key=None, value=f"{tag}-{seq + i}".encode(), headers=[])
    return bytes(b.build())


async def produce(conn: KafkaConnection, topic: str, data: bytes) -> tuple[int, int]:
    body = {"acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": data}]}]}
    resp = await conn.request(ApiKey.PRODUCE, PRODUCE_VERSION, body)
    part = resp["responses"][0]["partition_responses"][0]
    return part["error_code"], part["base_offset"]


async def produce_once_led(conn: KafkaConnection, topic: str, data: bytes) -> tuple[int, int]:
    """`produce`, retried while the partition has no leader here yet (as a client retries)."""
    result: tuple[int, int] = (-1, -1)

    async def attempt() -> bool:
        nonlocal result
        result = await produce(conn, topic, data)
        return result[0] not in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                                 ErrorCode.NOT_LEADER_FOR_PARTITION)

    await wait_for(f"a leader for {topic}", attempt)
    return result


async def init_producer_id(conn: KafkaConnection, version: int = 4, txn_id: str | None = None,
                           pid: int = -1, epoch: int = -1) -> dict:
    body = {"transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": pid, "producer_epoch": epoch}
    return await conn.request(ApiKey.INIT_PRODUCER_ID, version, body)


async def test_init_producer_id_versions_and_errors(broker: BrokerProcess, zk_server: ZooKeeperServer) -> None:
    conn = await connect(broker)
    try:
        pids = []
        for version in range(5):  # v0-v1 classic, v2+ flexible
            r = await init_producer_id(conn, version)
            assert r["error_code"] == 0 and r["producer_epoch"] == 0
            pids.append(r["producer_id"])
        assert pids == list(range(pids[0], pids[0] + 5))
        # KIP-360: an idempotent producer bumping with its current id and epoch gets a new id, epoch 0.
        bumped = await init_producer_id(conn, 3, pid=pids[-1], epoch=0)
        assert bumped["error_code"] == 0 and bumped["producer_id"] == pids[-1] + 1 and bumped["producer_epoch"] == 0
        assert (await init_producer_id(conn, 3, pid=pids[-1]))["error_code"] == ErrorCode.INVALID_REQUEST
        # Transactions are not served: a clear, fatal error at once.
        r = await init_producer_id(conn, 4, txn_id="tx")
        assert (r["error_code"], r["producer_id"]) == (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        assert (await init_producer_id(conn, 1, txn_id=""))["error_code"] == ErrorCode.INVALID_REQUEST
    finally:
        await conn.close()
    async with zk_connect(zk_server) as zk:
        data, _ = await zk.get(L.PRODUCER_ID_BLOCK)
    assert json.loads(data) == {"version": 1, "broker": 0, "block_start": "0", "block_end": "999"}


async def test_retry_gap_and_fencing(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(0)
    await create_topic(broker, "idem")
    conn = await connect(broker)
    try:
        pid = (await init_producer_id(conn))["producer_id"]
        first = batch(pid, 0, 0, 3, "a")
        assert await produce(conn, "idem", first) == (0, 0)
        assert await produce(conn, "idem", batch(pid, 0, 3, 2, "a")) == (0, 3)
        # A retried batch is answered with its original offset and not written again.
        assert await produce(conn, "idem", first) == (0, 0)
        assert await produce(conn, "idem", batch(pid, 0, 6, 1, "a")) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        assert await produce(conn, "idem", batch(pid, 0, 5, 1, "a")) == (0, 5)
        assert await produce(conn, "idem", batch(pid, 1, 0, 1, "b")) == (0, 6)  # an epoch bump restarts at 0
        assert await produce(conn, "idem", batch(pid, 0, 6, 1, "a")) == (ErrorCode.INVALID_PRODUCER_EPOCH, -1)
        assert await produce(conn, "idem", batch(pid, 2, 4, 1, "c")) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        # Producers without an id are not checked at all.
        assert await produce(conn, "idem", batch(-1, -1, -1, 2, "n")) == (0, 7)
        assert await produce(conn, "idem", batch(-1, -1, -1, 2, "n")) == (0, 9)
    finally:
        await conn.close()

    # A clean restart loads the snapshot written at close: the last batch's retry is still known.
    broker.stop()
    snapshots = sorted(p.name for p in (broker.log_dir / "idem-0").glob("*.snapshot"))
    assert snapshots[-1] == f"{11:020d}.snapshot"
    broker.start()
    conn = await connect(broker)
    try:
        assert await produce_once_led(conn, "idem", batch(pid, 1, 0, 1, "b")) == (0, 6)
        assert await produce(conn, "idem", batch(pid, 1, 1, 1, "b")) == (0, 11)
    finally:
        await conn.close()


def big_batch(pid: int, epoch: int, seq: int, count: int = 80) -> bytes:
    """A batch past INLINE_APPEND_BYTES (80 x ~1 KB): written by the log directory's thread."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i in range(count):
        b.append(i, timestamp=None, key=None, value=f"{seq + i}:".encode().ljust(1000, b"."), headers=[])
    return bytes(b.build())


async def test_pipelined_large_batches_of_one_producer(broker_factory: Callable[..., BrokerProcess]) -> None:
    """One producer's large batches pipelined on one connection to one partition, as a Java client
    with max.in.flight 5 sends them: each checked behind the ones still being written, a retry of one
    answered with its offset, a gap refused, nothing written twice."""
    broker = broker_factory(0)
    await create_topic(broker, "pipe")
    conn = await connect(broker)
    try:
        pid = (await init_producer_id(conn))["producer_id"]
        assert await produce_once_led(conn, "pipe", batch(pid, 0, 0, 1, "w")) == (0, 0)
        batches = [big_batch(pid, 0, 1 + 80 * i) for i in range(5)]
        assert all(len(b) > INLINE_APPEND_BYTES for b in batches)
        sent = [batches[0], batches[1], batches[2], batches[1], batches[3], big_batch(pid, 0, 999), batches[4]]
        answers = await asyncio.gather(*(produce(conn, "pipe", b) for b in sent))
        assert answers == [(0, 1), (0, 81), (0, 161), (0, 81), (0, 241),
                           (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1), (0, 321)]
        # The retry and the gap appended nothing: the next batch follows the fifth.
        assert await produce(conn, "pipe", batch(pid, 0, 401, 1, "z")) == (0, 401)
    finally:
        await conn.close()


async def test_state_rebuilt_from_the_log_after_kill_9(broker_factory: Callable[..., BrokerProcess]) -> None:
    # A 3 s ZooKeeper session (not 6 s): the restart after kill -9 waits for the dead one to expire.
    broker = broker_factory(0, zookeeper_session_timeout_ms="3000")
    await create_topic(broker, "crash")
    conn = await connect(broker)
    try:
        pid = (await init_producer_id(conn))["producer_id"]
        for seq in range(0, 12, 3):
            assert await produce(conn, "crash", batch(pid, 0, seq, 3, "a")) == (0, seq)
    finally:
        await conn.close()
    broker.kill()  # no snapshot at close: the table must come back from the log itself
    broker.start()
    conn = await connect(broker)
    try:
        assert await produce_once_led(conn, "crash", batch(pid, 0, 9, 3, "a")) == (0, 9)
        assert await produce(conn, "crash", batch(pid, 0, 13, 1, "a")) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        assert await produce(conn, "crash", batch(pid, 0, 12, 1, "a")) == (0, 12)
    finally:
        await conn.close()
