"""The `minibroker` sink: idempotent writes, headers, and `writeStream` with a checkpoint.

One real broker behind a `LossyProxy` (advertised, so every client stays behind it) that can
swallow the answers to Produce requests: the records are appended, the writer never hears of
it and sends the request again. Records are read back with confluent-kafka (librdkafka).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from broker.zk.server import ZooKeeperServer  # noqa: E402
from pipeline.client import BrokerSession, ClientSettings, parse_bootstrap  # noqa: E402
from pipeline.producer import TaskProducer  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402
from tests.support.lossy_proxy import LossyProxy  # noqa: E402
from tests.support.readback import read_topic  # noqa: E402
from tests.support.topics import create_topic  # noqa: E402
from tests.support.traffic import produce_messages  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[LossyProxy]:
    workdir = tmp_path_factory.mktemp("sinkbroker")
    b = BrokerProcess(workdir, 0, zk_server_session.connect_string + f"/{workdir.name}")
    proxy = LossyProxy(b.port)
    proxy.start()
    b.props.write_text(b.props.read_text() + f"advertised.listeners=PLAINTEXT://{proxy.bootstrap}\n")
    b.start()
    try:
        yield proxy
    finally:
        proxy.stop()
        assert b.stop() == 0, b.log()


def values_per_partition(records: list) -> Counter:  # noqa: ANN001 (tests.support.readback.ReadRecord)
    return Counter((p, v) for p, _, _, v, _ in records)


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_request_retried_after_a_lost_answer(proxied: LossyProxy, idempotent: bool) -> None:
    """Inside one task: the idempotent producer's retry is recognised; without idempotence it appends twice."""
    topic = f"retried-{idempotent}".lower()
    asyncio.run(create_topic(proxied.bootstrap, topic, 2))
    settings = ClientSettings(parse_bootstrap(proxied.bootstrap), connect_timeout_s=20)
    seen_before, lost_before = proxied.produce_requests, proxied.lost
    with BrokerSession(settings) as session:
        producer = TaskProducer(session, acks=-1, codec=0, batch_bytes=2000, idempotent=idempotent,
                                round_robin_start=0)
        proxied.lose_produce_answers(2)
        for i in range(300):
            producer.add(topic, i % 2, None, b"v%03d" % i, (), 1_700_000_000_000 + i)
        producer.flush_all()
    assert proxied.lost - lost_before == 2
    batches = proxied.produce_requests - seen_before
    records = read_topic(proxied.bootstrap, topic, 2)
    written = Counter((i % 2, b"v%03d" % i) for i in range(300))
    if idempotent:
        assert values_per_partition(records) == written
        assert batches >= 4  # at least two batches, and the two whose answers were lost sent again
        assert producer.appended.producer_id >= 0
        # Offsets have no holes: nothing was appended and then hidden.
        for p in (0, 1):
            assert sorted(o for q, o, *_ in records if q == p) == list(range(150))
    else:
        twice = values_per_partition(records) - written
        assert sum(twice.values()) > 0 and not written - values_per_partition(records), twice


def test_batch_write_with_lost_answers_is_exactly_once_with_headers(spark, proxied: LossyProxy) -> None:  # noqa: ANN001
    topic = "headered"
    asyncio.run(create_topic(proxied.bootstrap, topic, 3))
    rows = [(f"k{i % 11}", f"value-{i}".encode(), [("n", str(i).encode()), ("n", None), ("bin", bytes([i % 256]))])
            for i in range(3000)]
    df = spark.createDataFrame(rows, "key string, value binary, headers array<struct<key:string,value:binary>>")
    lost_before = proxied.lost
    proxied.lose_produce_answers(3)
    (df.repartition(2).write.format("minibroker").option("bootstrap.servers", proxied.bootstrap)
     .option("topic", topic).option("batch.size", "16384").mode("append").save())
    assert proxied.lost - lost_before == 3
    got = read_topic(proxied.bootstrap, topic, 3)
    assert len(got) == 3000
    assert sorted((k.decode(), v, h) for _, _, k, v, h in got) == sorted(
        (k, v, [("n", h[0][1]), ("n", None), ("bin", h[2][1])]) for k, v, h in rows)


def test_topic_and_partition_columns_and_null_values(spark, proxied: LossyProxy) -> None:  # noqa: ANN001
    asyncio.run(create_topic(proxied.bootstrap, "to-a", 2))
    asyncio.run(create_topic(proxied.bootstrap, "to-b", 3))
    rows = [("to-a" if i % 2 else "to-b", i % 2, None if i % 10 == 0 else f"v{i}") for i in range(200)]
    df = spark.createDataFrame(rows, "topic string, partition int, value string").coalesce(1)
    df.write.format("minibroker").option("bootstrap.servers", proxied.bootstrap).mode("append").save()
    a, b = read_topic(proxied.bootstrap, "to-a", 2), read_topic(proxied.bootstrap, "to-b", 3)
    assert values_per_partition(a) == Counter((1, None if i % 10 == 0 else f"v{i}".encode())
                                              for i in range(200) if i % 2)
    assert values_per_partition(b) == Counter((0, None if i % 10 == 0 else f"v{i}".encode())
                                              for i in range(200) if i % 2 == 0)


def assert_fails_before_writing(spark, proxied: LossyProxy, df, needle: str, **options: str) -> None:  # noqa: ANN001
    seen = proxied.produce_requests
    w = df.write.format("minibroker").option("bootstrap.servers", proxied.bootstrap).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    with pytest.raises(Exception) as info:  # noqa: B017 (Spark wraps the error in its own types)
        w.save()
    assert needle in str(info.value), str(info.value)[-2000:]
    assert proxied.produce_requests == seen


def test_bad_sink_input_fails_naming_the_column_or_option(spark, proxied: LossyProxy) -> None:  # noqa: ANN001
    asyncio.run(create_topic(proxied.bootstrap, "bad-sink", 1))
    df = spark.createDataFrame([("a", "b")], "key string, value string")
    assert_fails_before_writing(spark, proxied, spark.createDataFrame([("a",)], "key string"),
                                "needs a 'value' column", topic="bad-sink")
    assert_fails_before_writing(spark, proxied, spark.createDataFrame([("v", 1)], "value string, headers int"),
                                "column 'headers' must be array<struct<key:string,value:binary>>", topic="bad-sink")
    assert_fails_before_writing(
        spark, proxied, spark.createDataFrame([("v", [("k", "x")])], "value string, headers array<struct<key:string,value:string>>"),
        "column 'headers' must be array<struct<key:string,value:binary>>", topic="bad-sink")
    assert_fails_before_writing(spark, proxied, df, "needs a 'topic' column")
    assert_fails_before_writing(spark, proxied, df, "enable.idempotence=true needs acks=all", topic="bad-sink",
                                acks="1", **{"enable.idempotence": "true"})


def _checkpoint_ids(checkpoint: Path, kind: str) -> list[int]:
    d = checkpoint / kind
    return sorted(int(f.name) for f in d.iterdir() if f.name.isdigit()) if d.exists() else []


def _source_offsets(checkpoint: Path, batch_id: int) -> dict[int, int]:
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    (doc,) = (json.loads(line) for line in lines[2:])  # version, metadata, then one line per source
    (per_partition,) = doc.values()
    return {int(p): o for p, o in per_partition.items()}


def test_stream_to_stream_restarted_from_its_checkpoint(spark, proxied: LossyProxy, tmp_path: Path) -> None:  # noqa: ANN001
    """readStream A -> transform -> writeStream B, stopped while producing goes on, restarted.

    Every input row reaches B. A duplicate may only come from the micro-batch that was planned
    (in the checkpoint's offset log) but not committed when the query stopped: Spark runs that
    batch again on restart. The test reads that batch's range from the checkpoint and checks
    every duplicate lies in it.
    """
    src, dst = "stream-in", "stream-out"
    asyncio.run(create_topic(proxied.bootstrap, src, 3))
    asyncio.run(create_topic(proxied.bootstrap, dst, 2))
    produced: list[tuple[int, int, bytes | None, bytes]] = []
    stop = threading.Event()

    def keep_producing() -> None:
        i = 0
        while not stop.is_set() and i < 100_000:
            produced.extend(produce_messages(proxied.bootstrap, src, [(f"k{n % 7}".encode(), b"v%d" % n, None)
                                                                       for n in range(i, i + 200)]))
            i += 200
            time.sleep(0.2)

    checkpoint = tmp_path / "checkpoint"

    def start(**trigger: object):  # noqa: ANN202
        stream = (spark.readStream.format("minibroker").option("bootstrap.servers", proxied.bootstrap)
                  .option("topic", src).option("startingOffsets", "earliest").load()
                  .selectExpr("key", "upper(CAST(value AS STRING)) AS value",
                              "array(named_struct('key', 'src', 'value', "
                              "CAST(concat(partition, ':', offset) AS BINARY))) AS headers"))
        return (stream.writeStream.format("minibroker").option("bootstrap.servers", proxied.bootstrap)
                .option("topic", dst).option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())

    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        query = start(processingTime="500 milliseconds")
        deadline = time.monotonic() + 120
        while sum(p["numInputRows"] for p in query.recentProgress) < 1000:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.2)
        query.stop()
        assert producer.is_alive(), "the producer should still be running across the restart"
    finally:
        stop.set()
        producer.join()
    planned, committed = _checkpoint_ids(checkpoint, "offsets"), _checkpoint_ids(checkpoint, "commits")
    rerun: set[tuple[int, int]] = set()
    if planned and (not committed or planned[-1] > committed[-1]):
        end = _source_offsets(checkpoint, planned[-1])
        begin = _source_offsets(checkpoint, planned[-2]) if len(planned) > 1 else dict.fromkeys(end, 0)
        rerun = {(p, o) for p in end for o in range(begin.get(p, 0), end[p])}

    query = start(availableNow=True)
    assert query.awaitTermination(300), "the availableNow run did not finish"
    assert query.exception() is None

    out = read_topic(proxied.bootstrap, dst, 2)
    sources: Counter[tuple[int, int]] = Counter()
    for *_, headers in out:
        (name, origin), = headers
        p, o = (int(x) for x in origin.decode().split(":"))
        sources[(p, o)] += 1
        assert name == "src"
    want = {(p, o): (k, v) for p, o, k, v in produced}
    assert len(produced) > 1000
    assert set(sources) == set(want), (len(set(want) - set(sources)), len(set(sources) - set(want)))
    duplicated = {so for so, n in sources.items() if n > 1}
    assert all(n <= 2 for n in sources.values())
    assert duplicated <= rerun, f"{len(duplicated - rerun)} duplicates outside the re-run batch"
    # Each output row carries its input's key and upper-cased value.
    by_origin = {tuple(int(x) for x in h[0][1].decode().split(":")): (k, v) for _, _, k, v, h in out}
    assert all(by_origin[so] == (k, v.upper()) for so, (k, v) in want.items())
