"""Spark's Kafka-source reading options on the `minibroker` source, against a real broker, a real
ZooKeeper, confluent-kafka and real Spark (local mode, the session's one SparkSession).

Multi-topic, pattern and assign subscriptions read exactly what was produced; a topic created
while a pattern stream runs is picked up from its first offset; confluent-kafka's headers come
back in the `headers` column; startingOffsetsByTimestamp agrees with confluent-kafka's
offsets_for_times; minPartitions gives more tasks and the same rows; a stream's progress
carries the high watermarks (reportLatestOffset) from which Spark's lag figures follow; and a
checkpoint left behind by retention fails the query naming the partition and the lost range, or,
with failOnDataLoss=false, skips exactly the deleted offsets.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from broker.zk.server import ZooKeeperServer  # noqa: E402
from pipeline.client import EARLIEST, BrokerSession, ClientSettings, DataLossError, parse_bootstrap  # noqa: E402
from pipeline.lag import offsets_behind_latest  # noqa: E402
from tests.support.brokers import BrokerProcess, chrooted_broker  # noqa: E402
from tests.support.topics import create_topic  # noqa: E402
from tests.support.traffic import produce_messages  # noqa: E402

pytestmark = pytest.mark.integration

HEADERS_SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                  "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[BrokerProcess]:
    """One broker that checks retention twice a second, so a test can watch records age out."""
    with chrooted_broker(tmp_path_factory.mktemp("sparkread"), zk_server_session.connect_string,
                         {"log.retention.check.interval.ms": "500"}) as b:
        yield b


def read(spark, broker: BrokerProcess, **options: str):  # noqa: ANN001, ANN201
    r = spark.read.format("minibroker").option("bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_of(df) -> set[tuple[str, int, int, bytes]]:  # noqa: ANN001
    return {(r["topic"], r["partition"], r["offset"], bytes(r["value"]))
            for r in df.select("topic", "partition", "offset", "value").collect()}


def produced_rows(broker: BrokerProcess, topic: str, values: dict[int, int]) -> set[tuple[str, int, int, bytes]]:
    """values[p] messages on partition p; (topic, partition, offset, value) of each."""
    msgs = [(None, f"{topic}/{p}/{i}".encode(), p) for p, n in values.items() for i in range(n)]
    return {(topic, p, o, v) for p, o, _, v in produce_messages(broker.bootstrap, topic, msgs)}


def fails(action, *needles: str) -> str:  # noqa: ANN001
    with pytest.raises(Exception) as info:  # noqa: B017 (Spark wraps the Python error in its own types)
        action()
    message = str(info.value)
    for needle in needles:
        assert needle in message, message[-3000:]
    return message


def earliest(broker: BrokerProcess, topic: str) -> int:
    with BrokerSession(ClientSettings(parse_bootstrap(broker.bootstrap))) as s:
        return s.list_offsets(topic, [0], EARLIEST)[0]


def test_subscribe_list_pattern_assign_and_min_partitions(spark, broker) -> None:  # noqa: ANN001
    for topic, n in (("multi-a", 2), ("multi-b", 1), ("other-c", 1)):
        asyncio.run(create_topic(broker, topic, n))
    a = produced_rows(broker, "multi-a", {0: 30, 1: 12})
    b = produced_rows(broker, "multi-b", {0: 9})
    c = produced_rows(broker, "other-c", {0: 4})

    both = read(spark, broker, subscribe="multi-a, multi-b")
    assert both.rdd.getNumPartitions() == 3
    assert rows_of(both) == a | b
    # Java's Matcher.matches(): the whole name; other-c does not match, __consumer_offsets never would.
    assert rows_of(read(spark, broker, subscribePattern="multi-.*")) == a | b
    assert rows_of(read(spark, broker, subscribePattern="multi-[b-z]|other-.")) == b | c
    assigned = read(spark, broker, assign=json.dumps({"multi-a": [1], "other-c": [0]}))
    assert rows_of(assigned) == {r for r in a if r[1] == 1} | c
    # Offsets for several topics in one option.
    ranged = read(spark, broker, subscribe="multi-a,multi-b",
                  startingOffsets=json.dumps({"multi-a": {"0": 25, "1": -2}, "multi-b": {"0": 5}}),
                  endingOffsets=json.dumps({"multi-a": {"0": 28}, "multi-b": {"0": -1}}))
    assert rows_of(ranged) == ({r for r in a if (r[1] == 0 and 25 <= r[2] < 28) or r[1] == 1}
                               | {r for r in b if r[2] >= 5})

    # minPartitions 6 over 51 offsets (Spark's calculator): multi-a-1 (12) and multi-b-0 (9) round to
    # one task each, multi-a-0 (30) takes the other 4; more tasks than topic partitions, the same rows.
    split = read(spark, broker, subscribe="multi-a,multi-b", minPartitions="6")
    assert split.rdd.getNumPartitions() == 6
    assert rows_of(split) == a | b
    assert split.count() == len(a | b)  # no row twice

    # Bad input fails before anything is read, naming the option.
    fails(lambda: read(spark, broker, assign=json.dumps({"multi-a": [0, 5]})).collect(),
          "option assign names partition(s) [5] of topic 'multi-a', which has partitions [0, 1]")
    fails(lambda: read(spark, broker, subscribe="multi-a", assign='{"multi-a": [0]}').collect(),
          "Only one of the following options can be specified")
    fails(lambda: read(spark, broker, subscribePattern="multi-(").collect(),
          "option subscribePattern: 'multi-(' is not a valid pattern")
    fails(lambda: read(spark, broker, subscribe="multi-a", **{"kafka.auto.offset.reset": "earliest"}).collect(),
          "Kafka option 'auto.offset.reset' is not supported")


def test_headers_from_confluent_kafka(spark, broker) -> None:  # noqa: ANN001
    topic = "with-headers"
    asyncio.run(create_topic(broker, topic, 1))
    sent = [[("trace-id", b"abc"), ("bin", b"\x00\xff")],
            [],
            [("dup", b"1"), ("dup", b"2"), ("nothing", None)],
            [("unicode-ключ", "значение".encode())]]
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": False})
    for i, headers in enumerate(sent):
        p.produce(topic, value=f"v{i}".encode(), headers=headers or None)
    assert p.flush(60) == 0

    df = read(spark, broker, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == HEADERS_SCHEMA  # Spark's place: the last column
    got = sorted((r["offset"], r["headers"]) for r in df.select("offset", "headers").collect())
    assert [None if h is None else [(x["key"], None if x["value"] is None else bytes(x["value"])) for x in h]
            for _, h in got] == [sent[0], None, sent[2], sent[3]]  # Spark's source: null when there are none
    # Without the option there is no headers column.
    assert "headers" not in read(spark, broker, subscribe=topic).columns



def test_headers_round_trip_confluent_kafka_to_spark_to_the_sink_to_kcat(spark, broker) -> None:  # noqa: ANN001
    """Issue 22's round trip: headers written by confluent-kafka, read by the source with
    includeHeaders, written back out by the sink from the `headers` column, read by kcat."""
    src, out = "hdr-in", "hdr-out"
    asyncio.run(create_topic(broker, src, 1))
    asyncio.run(create_topic(broker, out, 1))
    sent = [[("trace-id", b"abc"), ("dup", b"1"), ("dup", b"2")],
            [("empty", b"")],
            [("unicode-ключ", "значение".encode())]]
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": False})
    for i, headers in enumerate(sent):
        p.produce(src, key=f"k{i}".encode(), value=f"v{i}".encode(), headers=headers)
    assert p.flush(60) == 0

    df = read(spark, broker, subscribe=src, includeHeaders="true").select("key", "value", "headers")
    (df.coalesce(1).write.format("minibroker").option("bootstrap.servers", broker.bootstrap)
     .option("topic", out).mode("append").save())

    got = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", out, "-o", "beginning", "-e", "-q", "-J"],
                         capture_output=True, timeout=60, check=True).stdout.decode().splitlines()
    envelopes = sorted((json.loads(line) for line in got if line), key=lambda e: e["offset"])
    assert [(e["key"], e["payload"]) for e in envelopes] == [(f"k{i}", f"v{i}") for i in range(len(sent))]
    # kcat -J lists headers as [key, value, key, value, ...], in record order.
    assert [e["headers"] for e in envelopes] == [[x for k, v in h for x in (k, v.decode())] for h in sent]


def test_log_append_time_topic_reads_timestamp_type_1(spark, broker) -> None:  # noqa: ANN001
    topic = "appended"
    asyncio.run(create_topic(broker, topic, 1, configs={"message.timestamp.type": "LogAppendTime"}))
    before = time.time()
    produce_messages(broker.bootstrap, topic, [(None, b"v", 0)] * 3)
    rows = read(spark, broker, subscribe=topic).select("timestamp", "timestampType").collect()
    assert [r["timestampType"] for r in rows] == [1, 1, 1]
    assert all(before - 5 <= r["timestamp"].timestamp() <= time.time() + 5 for r in rows)


def test_starting_offsets_by_timestamp_match_offsets_for_times(spark, broker) -> None:  # noqa: ANN001
    base = 1_700_000_000_000
    topics = {"ts-a": 2, "ts-b": 1}
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": False})
    for topic, n in topics.items():
        asyncio.run(create_topic(broker, topic, n))
        for part in range(n):
            for i in range(40):
                p.produce(topic, value=b"x", partition=part, timestamp=base + 100 * i + 7 * part)
    assert p.flush(60) == 0
    asked = {"ts-a": {"0": base + 1050, "1": base + 2}, "ts-b": {"0": base + 3900}}
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ts-check"})
    answers = c.offsets_for_times([TopicPartition(t, int(part), ts) for t, ps in asked.items()
                                   for part, ts in ps.items()], 30)
    c.close()
    first = {(tp.topic, tp.partition): tp.offset for tp in answers}
    assert first == {("ts-a", 0): 11, ("ts-a", 1): 0, ("ts-b", 0): 39}

    df = read(spark, broker, subscribe="ts-a,ts-b", startingOffsetsByTimestamp=json.dumps(asked))
    got: dict[tuple[str, int], list[int]] = {}
    for r in df.select("topic", "partition", "offset").collect():
        got.setdefault((r["topic"], r["partition"]), []).append(r["offset"])
    assert {tp: sorted(o) for tp, o in got.items()} == {tp: list(range(o, 40)) for tp, o in first.items()}


def test_pattern_stream_picks_up_a_new_topic_and_reports_latest_offsets(spark, broker, tmp_path: Path) -> None:  # noqa: ANN001
    asyncio.run(create_topic(broker, "grow-1", 2))
    want = produced_rows(broker, "grow-1", {0: 60, 1: 40})
    query = (spark.readStream.format("minibroker").option("bootstrap.servers", broker.bootstrap)
             .option("subscribePattern", "grow-[0-9]+").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "30").load()
             .selectExpr("topic", "partition", "offset", "value")
             .writeStream.format("parquet").option("path", str(tmp_path / "sink"))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="500 milliseconds").start())
    try:
        def progress_rows() -> int:
            assert query.exception() is None, query.exception()
            return sum(p["numInputRows"] for p in query.recentProgress)

        deadline = time.monotonic() + 120
        while progress_rows() < 100:
            assert time.monotonic() < deadline, f"read {progress_rows()} of 100"
            time.sleep(0.3)
        # The first batches were capped at 30 offsets while 100 were there: the progress shows
        # the high watermarks as latestOffset, and Spark's lag figures follow from them.
        progresses = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert max(p["numInputRows"] for p in progresses) <= 30
        first = progresses[0]["sources"][0]
        assert json.loads(first["latestOffset"]) == {"grow-1": {"0": 60, "1": 40}}
        end = json.loads(first["endOffset"])["grow-1"]
        behind = [60 - end["0"], 40 - end["1"]]
        assert sum(behind) == 70
        assert offsets_behind_latest(first) == {"minOffsetsBehindLatest": str(min(behind)),
                                                "maxOffsetsBehindLatest": str(max(behind)),
                                                "avgOffsetsBehindLatest": repr(sum(behind) / 2)}
        # What pyspark cannot do: a Python source reports no custom metrics (pipeline/lag.py).
        assert first["metrics"] == {}

        # A topic created while the stream runs is read from its first offset.
        asyncio.run(create_topic(broker, "grow-2", 1))
        want |= produced_rows(broker, "grow-2", {0: 25})
        asyncio.run(create_topic(broker, "grown-3", 1))  # does not match the whole pattern
        produced_rows(broker, "grown-3", {0: 5})
        while progress_rows() < 125:
            assert time.monotonic() < deadline, f"read {progress_rows()} of 125"
            time.sleep(0.3)
        last = query.recentProgress[-1]["sources"][0]
        assert json.loads(last["latestOffset"]) == {"grow-1": {"0": 60, "1": 40}, "grow-2": {"0": 25}}
    finally:
        query.stop()
    got = spark.read.parquet(str(tmp_path / "sink")).collect()
    assert len(got) == 125
    assert {(r["topic"], r["partition"], r["offset"], bytes(r["value"])) for r in got} == want


def test_fail_on_data_loss_after_retention_deletes_unread_records(spark, broker, tmp_path: Path) -> None:  # noqa: ANN001
    """A stream reads offsets 0..19 and stops (paused); retention then deletes every segment but
    the active one. Restarted from its checkpoint it fails naming the partition and the lost
    range [20, log start); with failOnDataLoss=false it reads exactly what is left."""
    topic = "aging"
    asyncio.run(create_topic(broker, topic, 1, configs={"retention.ms": "3000", "segment.bytes": "2048"}))
    first = produced_rows(broker, topic, {0: 20})
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "cp")

    def run(**options: str):  # noqa: ANN202
        r = (spark.readStream.format("minibroker").option("bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest"))
        for k, v in options.items():
            r = r.option(k, v)
        return (r.load().selectExpr("topic", "partition", "offset", "value").writeStream.format("parquet")
                .option("path", sink).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    query = run()
    assert query.awaitTermination(180) and query.exception() is None
    assert rows_of(spark.read.parquet(sink)) == first

    # 60 more messages of 200 bytes roll several 2 KB segments; once they are older than
    # retention.ms, every segment but the active one goes, taking offsets 20.. with them.
    late = [(None, b"late-%d-" % i + b"x" * 200, 0) for i in range(60)]
    # batch.size below two messages: one message per batch, so segments roll every ~7 messages.
    rest = {(topic, p, o, v) for p, o, _, v in produce_messages(broker.bootstrap, topic, late, **{"batch.size": 300})}
    assert sorted(r[2] for r in rest) == list(range(20, 80))
    produced_at = time.monotonic()
    deadline = produced_at + 60
    while earliest(broker, topic) <= 20:
        assert time.monotonic() < deadline, "retention deleted nothing"
        time.sleep(0.5)
    time.sleep(max(0.0, produced_at + 3 + 2 - time.monotonic()))  # every closed segment has expired by now
    start = earliest(broker, topic)
    assert 20 < start < 80

    # A read task meeting the same loss (retention ran after planning) fails or skips likewise.
    with BrokerSession(ClientSettings(parse_bootstrap(broker.bootstrap))) as session:
        with pytest.raises(DataLossError, match=re.escape(f"Could not read records in offset [20, {start}) for "
                                                          f"topic partition {topic}-0")):
            next(session.fetch_range(topic, 0, 20, 80))
        skipped = [r.offset for records in session.fetch_range(topic, 0, 20, 80, fail_on_data_loss=False)
                   for r in records]
        assert skipped == list(range(start, 80))

    query = run()
    fails(lambda: query.awaitTermination(180),
          f"Could not read records in offset [20, {start}) for topic partition {topic}-0: the log now starts at "
          f"offset {start}", "set the source option failOnDataLoss to false")

    query = run(failOnDataLoss="false")
    assert query.awaitTermination(180) and query.exception() is None
    got = spark.read.parquet(sink).collect()
    assert sorted(r["offset"] for r in got) == list(range(20)) + list(range(start, 80))
    assert {(r["topic"], r["partition"], r["offset"], bytes(r["value"])) for r in got} == (
        first | {r for r in rest if r[2] >= start})


def test_fail_on_data_loss_when_a_subscribed_topic_is_deleted(spark, broker, tmp_path: Path) -> None:  # noqa: ANN001
    """A stream over two topics stops; one topic is deleted. Restarted, it fails naming the
    deleted partitions and where it had got to; with failOnDataLoss=false it reads on."""
    from confluent_kafka.admin import AdminClient

    asyncio.run(create_topic(broker, "gone-a", 2))
    asyncio.run(create_topic(broker, "stay-b", 1))
    first = produced_rows(broker, "gone-a", {0: 5, 1: 3}) | produced_rows(broker, "stay-b", {0: 4})
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "cp")

    def run(**options: str):  # noqa: ANN202
        r = (spark.readStream.format("minibroker").option("bootstrap.servers", broker.bootstrap)
             .option("subscribe", "gone-a,stay-b").option("startingOffsets", "earliest"))
        for k, v in options.items():
            r = r.option(k, v)
        return (r.load().selectExpr("topic", "partition", "offset", "value").writeStream.format("parquet")
                .option("path", sink).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    query = run()
    assert query.awaitTermination(180) and query.exception() is None
    assert rows_of(spark.read.parquet(sink)) == first

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.delete_topics(["gone-a"], operation_timeout=30).values():
        f.result(60)
    deadline = time.monotonic() + 60
    while "gone-a" in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "gone-a is still listed"
        time.sleep(0.3)
    later = produced_rows(broker, "stay-b", {0: 6})  # offsets 4..9

    query = run()
    fails(lambda: query.awaitTermination(180),
          "Partitions [gone-a-0, gone-a-1] have been deleted: records not yet read are lost "
          "(gone-a-0 from offset 5, gone-a-1 from offset 3 on)", "failOnDataLoss to false")
    query = run(failOnDataLoss="false")
    assert query.awaitTermination(180) and query.exception() is None
    assert rows_of(spark.read.parquet(sink)) == first | later
    assert len(spark.read.parquet(sink).collect()) == len(first | later)
