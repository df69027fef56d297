"""The `minibroker` PySpark data source against a real broker, a real ZooKeeper and real Spark.

Batch reads are compared message by message with what confluent-kafka produced; a streaming
query stopped and restarted from its checkpoint while a producer runs must land every message
in its parquet sink exactly once; rows written by the sink must read back with kcat; and each
kind of bad input must fail the query with a message that names the cause.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import textwrap
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pipeline.partitioner import murmur2, partition_for_key  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.tools import groups, table_rows  # noqa: E402
from tests.support.topics import create_topic, topic_names  # noqa: E402
from tests.support.traffic import produce_messages  # noqa: E402

pytestmark = pytest.mark.integration

SPARK_KAFKA_SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                      "timestamp:timestamp,timestampType:int>")


def reader(spark, broker, topic: str, **options: str):  # noqa: ANN001, ANN201
    r = spark.read.format("minibroker").option("bootstrap.servers", broker.bootstrap).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def by_partition(rows) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:  # noqa: ANN001
    out: dict[int, list] = defaultdict(list)
    for r in rows:
        out[r["partition"]].append((r["offset"], None if r["key"] is None else bytes(r["key"]),
                                    None if r["value"] is None else bytes(r["value"])))
    return dict(out)


def test_batch_reads_10k_messages_exactly_in_partition_order(spark, spark_broker) -> None:  # noqa: ANN001
    topic = "batch10k"
    asyncio.run(create_topic(spark_broker, topic, 3))
    messages = [(f"key-{i}".encode(), f"value-{i}-".encode() + b"x" * (i % 50), i % 3) for i in range(10_000)]
    delivered = produce_messages(spark_broker.bootstrap, topic, messages)
    expected: dict[int, list] = defaultdict(list)
    for p, o, k, v in sorted(delivered):
        expected[p].append((o, k, v))

    df = reader(spark, spark_broker, topic)
    assert df.schema.simpleString() == SPARK_KAFKA_SCHEMA
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()  # one Spark partition per topic partition, each in offset order
    assert len(rows) == 10_000
    assert by_partition(rows) == dict(expected)
    assert {r["topic"] for r in rows} == {topic}
    assert {r["timestampType"] for r in rows} == {0}
    now = time.time()
    assert all(now - 600 < r["timestamp"].timestamp() <= now + 5 for r in rows)

    # Explicit ranges, Spark Kafka style: -2 earliest, -1 latest, concrete offsets elsewhere.
    counts = expected_len = {p: len(expected[p]) for p in expected}
    start = {"0": 100, "1": -2, "2": counts[2] - 7}
    end = {"0": 250, "1": 1, "2": -1}
    sub = reader(spark, spark_broker, topic, startingOffsets=json.dumps({topic: start}),
                 endingOffsets=json.dumps({topic: end})).select("partition", "offset").collect()
    got = sorted((r["partition"], r["offset"]) for r in sub)
    assert got == ([(0, o) for o in range(100, 250)] + [(1, 0)]
                   + [(2, o) for o in range(expected_len[2] - 7, expected_len[2])])


def test_batch_reads_compressed_wrappers_with_small_fetches(spark, spark_broker) -> None:  # noqa: ANN001
    """Compressed wrappers hold many messages; tiny fetches end mid-message; a start mid-wrapper."""
    topic = "batchlz4"
    asyncio.run(create_topic(spark_broker, topic, 1))
    messages = [(None if i % 10 == 0 else f"k{i}".encode(), f"v{i}".encode() * (1 + i % 7), 0) for i in range(3000)]
    delivered = produce_messages(spark_broker.bootstrap, topic, messages, **{"compression.codec": "lz4", "linger.ms": 20})
    expected = sorted((o, k, v) for _, o, k, v in delivered)
    rows = reader(spark, spark_broker, topic, startingOffsets=json.dumps({topic: {"0": 777}}),
                  **{"fetch.max.bytes": "700"}).collect()
    assert by_partition(rows) == {0: expected[777:]}
    assert all((r["key"] is None) == (r["offset"] % 10 == 0) for r in rows)  # null keys stay null


def test_stream_restarted_from_checkpoint_sees_every_message_once(spark, spark_broker,  # noqa: ANN001
                                                                  tmp_path: Path) -> None:
    topic = "stream3"
    asyncio.run(create_topic(spark_broker, topic, 3))
    produced: list[tuple[int, int, bytes | None, bytes]] = []
    produced += produce_messages(spark_broker.bootstrap, topic, [(b"early", f"e{i}".encode(), None) for i in range(200)])
    stop_producing = threading.Event()

    def keep_producing() -> None:
        # Runs until both restarts are over, so every restart happens while data is arriving.
        chunk = 0
        while not stop_producing.is_set() and chunk < 200:
            produced.extend(produce_messages(spark_broker.bootstrap, topic,
                                             [(f"k{i % 13}".encode(), f"v{i}".encode(), None)
                                              for i in range(chunk * 100, chunk * 100 + 100)]))
            chunk += 1
            time.sleep(0.2)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")

    def start(**trigger: object):  # noqa: ANN202
        stream = (spark.readStream.format("minibroker").option("bootstrap.servers", spark_broker.bootstrap)
                  .option("topic", topic).option("startingOffsets", "earliest").load()
                  .selectExpr("partition", "offset", "key", "value"))
        return (stream.writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
                .trigger(**trigger).start())

    try:
        # Two processing-time runs stopped while the producer keeps going, then one availableNow run.
        for _ in range(2):
            query = start(processingTime="1 second")
            deadline = time.monotonic() + 60
            while sum(p["numInputRows"] for p in query.recentProgress) == 0 or len(query.recentProgress) < 2:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, "no progress"
                time.sleep(0.2)
            query.stop()
            assert producer.is_alive(), "the producer should still be running across the restarts"
    finally:
        stop_producing.set()
        producer.join()
    query = start(availableNow=True)
    assert query.awaitTermination(180), "the availableNow run did not finish"
    assert query.exception() is None

    rows = spark.read.parquet(sink).select("partition", "offset").collect()
    got = [(r["partition"], r["offset"]) for r in rows]
    assert len(produced) > 400
    want = {(p, o) for p, o, _, _ in produced}
    missing, extra = sorted(want - set(got)), sorted(set(got) - want)
    duplicates = len(got) - len(set(got))
    batches = [(b["batchId"], b["numInputRows"]) for b in query.recentProgress]
    assert not missing and not extra and not duplicates, (
        f"{len(missing)} missing (first {missing[:5]}, last {missing[-5:]}), {len(extra)} unexpected, "
        f"{duplicates} duplicated; last run's batches: {batches}")


def test_write_then_read_with_kcat(spark, spark_broker) -> None:  # noqa: ANN001
    topic = "written"
    asyncio.run(create_topic(spark_broker, topic, 3))
    rows = [(f"key-{i % 37}", f"value-{i}") for i in range(2000)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(2)
    df.write.format("minibroker").option("bootstrap.servers", spark_broker.bootstrap).option("topic", topic) \
        .mode("append").save()
    out = subprocess.run(["kcat", "-b", spark_broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                          "-f", "%p:%k:%s\n"], capture_output=True, timeout=60, check=True)
    lines = out.stdout.decode().splitlines()
    got = sorted(tuple(line.split(":", 2)) for line in lines)
    # Keyed rows go where the Java producer (and librdkafka's murmur2_random) would put them.
    assert got == sorted((str(partition_for_key(k.encode(), 3)), k, v) for k, v in rows)
    # Each Spark task appends its rows in order: per key, values come in the order they were written.
    per_key: dict[str, list[int]] = defaultdict(list)
    for line in lines:
        _, k, v = line.split(":", 2)
        per_key[k].append(int(v.removeprefix("value-")))
    assert all(len(vs) == len(set(vs)) for vs in per_key.values())


def test_write_partition_column_binary_values_and_murmur2_matches_librdkafka(spark, spark_broker) -> None:  # noqa: ANN001
    topic = "written-p"
    asyncio.run(create_topic(spark_broker, topic, 4))
    rows = [(i % 4 if i % 5 else None, None, bytes([65 + i % 26]) * (1 + i % 9)) for i in range(400)]
    df = spark.createDataFrame(rows, "partition int, key binary, value binary").coalesce(1)
    df.write.format("minibroker").option("bootstrap.servers", spark_broker.bootstrap).option("topic", topic) \
        .option("compression.type", "gzip").mode("append").save()
    out = subprocess.run(["kcat", "-b", spark_broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                          "-f", "%p:%s\n"], capture_output=True, timeout=60, check=True)
    got = [tuple(line.split(":", 1)) for line in out.stdout.decode().splitlines()]
    assert len(got) == 400
    explicit = sorted((str(p), v.decode()) for p, _, v in rows if p is not None)
    assert sorted(g for g in got if (g[0], g[1]) in set(explicit)) == explicit
    # Keyless rows without a partition are spread round-robin over every partition.
    assert {p for p, _ in got} == {"0", "1", "2", "3"}

    # The sink's key hash agrees with librdkafka's Java-compatible partitioner.
    keys = [f"user-{i}".encode() for i in range(50)]
    delivered = produce_messages(spark_broker.bootstrap, topic, [(k, b"x", None) for k in keys],
                        partitioner="murmur2_random")
    assert sorted((k, p) for p, _, k, _ in delivered) == sorted((k, partition_for_key(k, 4)) for k in keys)
    assert murmur2(b"21") == (-973932308) & 0xFFFFFFFF  # Kafka's own test vector


def assert_fails(action, *needles: str, within: float = 60) -> str:  # noqa: ANN001
    t0 = time.monotonic()
    with pytest.raises(Exception) as info:  # noqa: B017 (Spark wraps the worker's error in its own types)
        action()
    elapsed = time.monotonic() - t0
    message = str(info.value)
    for needle in needles:
        assert needle in message, message[-3000:]
    assert elapsed < within, f"took {elapsed:.1f} s"
    return message


def test_unknown_topic_fails_clearly_and_is_not_created(spark, spark_broker, tmp_path: Path) -> None:  # noqa: ANN001
    assert_fails(lambda: reader(spark, spark_broker, "no-such-topic").collect(), "unknown topic 'no-such-topic'")

    query = (spark.readStream.format("minibroker").option("bootstrap.servers", spark_broker.bootstrap)
             .option("topic", "no-such-stream").load()
             .writeStream.format("parquet").option("path", str(tmp_path / "s"))
             .option("checkpointLocation", str(tmp_path / "c")).start())
    assert_fails(lambda: query.awaitTermination(60), "unknown topic 'no-such-stream'")
    assert not {"no-such-topic", "no-such-stream"} & asyncio.run(topic_names(spark_broker))


def test_unreachable_bootstrap_server_fails_within_the_timeout(spark) -> None:  # noqa: ANN001
    port = free_port()  # nothing listens there
    df = (spark.read.format("minibroker").option("bootstrap.servers", f"127.0.0.1:{port}")
          .option("topic", "t").option("timeout.ms", "3000").load())
    assert_fails(df.collect, "could not connect to any bootstrap server", f"127.0.0.1:{port}", "within 3 s",
                 within=30)


def test_offsets_beyond_the_log_fail_clearly(spark, spark_broker) -> None:  # noqa: ANN001
    topic = "short"
    asyncio.run(create_topic(spark_broker, topic, 1))
    produce_messages(spark_broker.bootstrap, topic, [(b"k", b"v", 0)] * 10)
    assert_fails(lambda: reader(spark, spark_broker, topic, endingOffsets=json.dumps({topic: {"0": 1000}})).collect(),
                 "offset 1000 of short-0 is beyond the log", "0..10")
    assert_fails(lambda: reader(spark, spark_broker, topic, startingOffsets=json.dumps({topic: {"0": 11}})).collect(),
                 "offset 11 of short-0 is beyond the log")
    assert_fails(lambda: reader(spark, spark_broker, topic, startingOffsets=json.dumps({topic: {"7": 0}})).collect(),
                 "partition(s) [7]")


BASE_TS = 1_700_000_000_000


def produce_with_timestamps(broker, topic: str, counts: dict[int, int]) -> None:  # noqa: ANN001
    """counts[p] messages on partition p, message i carrying timestamp BASE_TS + 10 * i (kafka-python:
    its RecordBatch v2 carries the timestamps as given)."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5, enable_idempotence=False)
    try:
        futures = [p.send(topic, value=b"v%d" % i, partition=partition, timestamp_ms=BASE_TS + 10 * i)
                   for partition, n in counts.items() for i in range(n)]
        p.flush(60)
        assert all(f.get(timeout=30).offset >= 0 for f in futures)
    finally:
        p.close(10)


def offsets_read(df) -> dict[int, list[int]]:  # noqa: ANN001
    out: dict[int, list[int]] = defaultdict(list)
    for r in df.select("partition", "offset").collect():
        out[r["partition"]].append(r["offset"])
    return {p: sorted(o) for p, o in out.items()}


def test_offsets_by_timestamp_follow_sparks_kafka_source(spark, spark_broker, tmp_path: Path) -> None:  # noqa: ANN001
    topic = "bytime"
    asyncio.run(create_topic(spark_broker, topic, 2))
    produce_with_timestamps(spark_broker, topic, {0: 100, 1: 50})  # partition 0 ends at +990, 1 at +490

    # The first offset whose timestamp is >= the one given, per partition.
    by_partition = json.dumps({topic: {"0": BASE_TS + 255, "1": BASE_TS + 100}})
    assert offsets_read(reader(spark, spark_broker, topic, startingOffsetsByTimestamp=by_partition)) == {
        0: list(range(26, 100)), 1: list(range(10, 50))}
    # startingTimestamp applies to every partition and wins over startingOffsetsByTimestamp and
    # startingOffsets; endingTimestamp bounds a batch the same way (exclusive).
    window = reader(spark, spark_broker, topic, startingTimestamp=str(BASE_TS + 300), startingOffsets="latest",
                    startingOffsetsByTimestamp=by_partition, endingTimestamp=str(BASE_TS + 400))
    assert offsets_read(window) == {0: list(range(30, 40)), 1: list(range(30, 40))}
    # No record at or after the timestamp: ending offsets fall back to latest...
    assert offsets_read(reader(spark, spark_broker, topic, startingTimestamp=str(BASE_TS + 450),
                               endingTimestamp=str(BASE_TS + 700))) == {0: list(range(45, 70)), 1: [45, 46, 47, 48, 49]}
    # ...starting ones fail the query (Spark's default strategy) or, with "latest", start at the end.
    assert_fails(lambda: reader(spark, spark_broker, topic, startingTimestamp=str(BASE_TS + 700)).collect(),
                 f"No offset matched from request of topic-partition {topic}-1 and timestamp {BASE_TS + 700}")
    late = reader(spark, spark_broker, topic, startingTimestamp=str(BASE_TS + 700),
                  startingOffsetsByTimestampStrategy="latest")
    assert offsets_read(late) == {0: list(range(70, 100))}
    assert_fails(lambda: reader(spark, spark_broker, topic,
                                startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_TS}})).collect(),
                 "must name every partition")

    # A new stream starts at the timestamp too.
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    query = (spark.readStream.format("minibroker").option("bootstrap.servers", spark_broker.bootstrap)
             .option("topic", topic).option("startingTimestamp", str(BASE_TS + 480)).load()
             .selectExpr("partition", "offset").writeStream.format("parquet").option("path", sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(180) and query.exception() is None
    assert offsets_read(spark.read.parquet(sink)) == {0: list(range(48, 100)), 1: [48, 49]}


def _example_block(text: str) -> str:
    start = text.index("# --- README example start\n") + len("# --- README example start\n")
    end = text.index("# --- README example end")
    return textwrap.dedent(text[start:text.rindex("\n", 0, end) + 1])


def test_readme_example_counts_messages_per_key(spark, spark_broker, tmp_path: Path) -> None:  # noqa: ANN001
    from pipeline import examples

    # The README shows exactly the code this test runs.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = Path(examples.__file__).read_text()
    assert _example_block(code).strip() in readme

    topic = "clicks"
    asyncio.run(create_topic(spark_broker, topic, 2))
    keys = [f"user-{i % 7}" for i in range(700)] + ["user-0"] * 5
    produce_messages(spark_broker.bootstrap, topic, [(k.encode(), b"x", None) for k in keys])
    examples.count_per_key(spark, spark_broker.bootstrap, topic, str(tmp_path / "checkpoint"))
    got = {r["key"]: r["count"] for r in spark.table("key_counts").collect()}
    assert got == {f"user-{i}": 100 + (5 if i == 0 else 0) for i in range(7)}


def test_stream_commits_processed_offsets_to_a_group(spark, spark_broker, tmp_path: Path) -> None:  # noqa: ANN001
    """With commitOffsetsToGroup, `minibroker groups --describe` shows what the query has processed."""
    topic, group = "lagwatch", "spark-lag"
    asyncio.run(create_topic(spark_broker, topic, 3))
    sizes = {0: 50, 1: 30, 2: 20}
    produce_messages(spark_broker.bootstrap, topic, [(None, f"v{i}".encode(), p) for p, n in sizes.items()
                                                     for i in range(n)])
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")

    def run_once() -> None:
        query = (spark.readStream.format("minibroker").option("bootstrap.servers", spark_broker.bootstrap)
                 .option("topic", topic).option("startingOffsets", "earliest")
                 .option("commitOffsetsToGroup", group).load()
                 .selectExpr("partition", "offset").writeStream.format("parquet").option("path", sink)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        assert query.awaitTermination(180) and query.exception() is None

    def described() -> list[list[str]]:
        r = groups(spark_broker.bootstrap, "--describe", "--group", group)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "has no active members" in r.stderr  # the query commits from outside the group
        rows = table_rows(r.stdout)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                           "HOST", "CLIENT-ID"]
        return sorted(rows[1:])

    run_once()
    assert len(spark.read.parquet(sink).collect()) == sum(sizes.values())
    assert described() == [[group, topic, str(p), str(n), str(n), "0", "-", "-", "-"] for p, n in sizes.items()]

    # Messages the query has not read yet are its lag; the next run catches up and commits.
    produce_messages(spark_broker.bootstrap, topic, [(None, b"late", 0)] * 7 + [(None, b"late", 2)] * 3)
    assert described() == [[group, topic, "0", "50", "57", "7", "-", "-", "-"],
                           [group, topic, "1", "30", "30", "0", "-", "-", "-"],
                           [group, topic, "2", "20", "23", "3", "-", "-", "-"]]
    run_once()
    assert described() == [[group, topic, "0", "57", "57", "0", "-", "-", "-"],
                           [group, topic, "1", "30", "30", "0", "-", "-", "-"],
                           [group, topic, "2", "23", "23", "0", "-", "-", "-"]]
    assert "spark-lag" in groups(spark_broker.bootstrap, "--list").stdout.split()
