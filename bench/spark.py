"""PySpark rows/s through the `minibroker` data source, next to kcat reading the same topic in the same run.

One broker (or --brokers N, the topics then replicated N times); a topic of 8 partitions holding
--messages messages (1,000,000 by default) of --value-bytes bytes with a key, produced with
confluent-kafka. Then, in one Spark session (--master, local[2] by default):

- kcat reads the whole topic (`-C -o beginning -e`): the rate a C client reaches here;
- a batch read (`spark.read`) that touches every value (sum of value lengths), with one Spark
  task per topic partition (minPartitions 1x) and, when this tree's source has the option,
  `minPartitions` = 4 x partitions;
- the streaming sink: a stream topic -> transform -> minibroker sink (`writeStream`, idempotent,
  acks=all) with trigger(availableNow=True), rows/s from start to end of the query, next to the
  same stream into Spark's `noop` sink (the streaming read's share);
- the batch sink: `df.write` of the same number of rows made in Spark (`spark.range`).

Each Spark measurement runs once after a small warm-up query. Speed is measured here, never in tests.

    .venv/bin/python -m bench.spark [--messages 1000000] [--master local[2]]

Writes bench/out/spark.json and bench/out/spark.png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import cluster, machine, progress, save_figure, write_json
from tests.support.tools import ROOT
from tests.support.topics import create_topic
from tests.support.traffic import produce_one

PARTITIONS = 8


def produce(bootstrap: str, topic: str, n: int, value_bytes: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 500_000,
                  "enable.idempotence": False})
    value = b"v" * value_bytes
    for i in range(n):
        produce_one(p, topic, value, key=b"key-%d" % (i % 1000), partition=i % PARTITIONS)
        if i and i % 200_000 == 0:
            progress(f"  produced {i:,}")
    assert p.flush(300) == 0


def kcat_read(bootstrap: str, topic: str, n: int) -> float:
    t0 = time.monotonic()
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%o\n"],
                         capture_output=True, check=True, timeout=1800)
    elapsed = time.monotonic() - t0
    got = out.stdout.count(b"\n")
    assert got == n, f"kcat read {got} of {n}"
    return elapsed


def session(master: str, scratch: Path) -> Any:  # noqa: ANN401
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from pipeline import register

    spark = (SparkSession.builder.master(master).appName("minibroker-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "1g")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", str(scratch / "local"))
             .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def has_min_partitions() -> bool:
    from pipeline.options import ReadOptions

    return "min_partitions" in ReadOptions.__dataclass_fields__


def spark_read(spark: Any, bootstrap: str, topic: str, n: int, **options: str) -> tuple[float, int]:  # noqa: ANN401
    reader = spark.read.format("minibroker").option("bootstrap.servers", bootstrap).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    tasks = df.rdd.getNumPartitions()
    t0 = time.monotonic()
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    elapsed = time.monotonic() - t0
    assert row["n"] == n, f"read {row['n']} of {n}"
    return elapsed, tasks


def stream_sink(spark: Any, bootstrap: str, src: str, dst: str | None, n: int, checkpoint: Path) -> float:  # noqa: ANN401
    """A stream src -> dst through the sink (dst None: Spark's `noop` sink, the read alone)."""
    t0 = time.monotonic()
    stream = (spark.readStream.format("minibroker").option("bootstrap.servers", bootstrap).option("topic", src)
              .option("startingOffsets", "earliest").load()
              .selectExpr("key", "value", "array(named_struct('key', 'src', 'value', "
                          "CAST(concat(partition, ':', offset) AS BINARY))) AS headers").writeStream)
    if dst is None:
        stream = stream.format("noop")
    else:
        stream = stream.format("minibroker").option("bootstrap.servers", bootstrap).option("topic", dst)
    query = stream.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()
    elapsed = time.monotonic() - t0
    assert query.exception() is None, query.exception()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    assert rows == n, f"the stream wrote {rows} of {n}"
    return elapsed


def batch_sink(spark: Any, bootstrap: str, dst: str, n: int, value_bytes: int, tasks: int) -> float:  # noqa: ANN401
    df = spark.range(0, n, 1, tasks).selectExpr("CAST(id % 1000 AS STRING) AS key",
                                                f"repeat('w', {value_bytes}) AS value")
    t0 = time.monotonic()
    df.write.format("minibroker").option("bootstrap.servers", bootstrap).option("topic", dst).mode("append").save()
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    n, rf = args.messages, args.brokers
    scratch = Path(tempfile.mkdtemp(prefix="minibroker-bench-spark-"))
    rates: dict[str, float] = {}
    detail: dict[str, Any] = {}
    try:
        with cluster(args.brokers) as brokers:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            for t in ("bench-in", "bench-out", "bench-written", "bench-warm"):
                asyncio.run(create_topic(brokers[0], t, PARTITIONS, rf))
            progress(f"producing {n:,} messages of {args.value_bytes} B to 8 partitions")
            produce(bootstrap, "bench-in", n, args.value_bytes)
            produce(bootstrap, "bench-warm", 10_000, args.value_bytes)

            progress("kcat reads the topic")
            rates["kcat read"] = n / kcat_read(bootstrap, "bench-in", n)

            spark = session(args.master, scratch)
            progress("warm-up")
            spark_read(spark, bootstrap, "bench-warm", 10_000)
            progress("Spark batch read, one task per partition")
            elapsed, tasks = spark_read(spark, bootstrap, "bench-in", n)
            rates["spark read, minPartitions 1x"] = n / elapsed
            detail["read_1x_tasks"] = tasks
            if has_min_partitions():
                progress("Spark batch read, minPartitions 4x")
                elapsed, tasks = spark_read(spark, bootstrap, "bench-in", n, minPartitions=str(4 * PARTITIONS))
                rates["spark read, minPartitions 4x"] = n / elapsed
                detail["read_4x_tasks"] = tasks
            else:
                detail["read_4x"] = "not run: this tree's source has no minPartitions option"
            progress("stream read alone: bench-in -> noop sink, availableNow")
            rates["stream read -> noop sink"] = n / stream_sink(spark, bootstrap, "bench-in", None, n,
                                                                 scratch / "checkpoint-noop")
            progress("streaming sink: stream bench-in -> bench-out, availableNow")
            rates["stream read + sink (writeStream)"] = n / stream_sink(spark, bootstrap, "bench-in", "bench-out", n,
                                                                         scratch / "checkpoint")
            progress("batch sink: df.write of spark.range rows")
            rates["batch sink (df.write)"] = n / batch_sink(spark, bootstrap, "bench-written", n, args.value_bytes,
                                                            PARTITIONS)
            spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    data = {"bench": "spark", "machine": machine(), "load_average_at_end": os.getloadavg(), "master": args.master,
            "messages": n, "value_bytes": args.value_bytes, "partitions": PARTITIONS, "brokers": args.brokers,
            "rows_per_s": {k: round(v) for k, v in rates.items()}, **detail}
    write_json("spark", data)
    plot(data)


def plot(data: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = data["rows_per_s"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = list(rates)
    ax.barh(names, [rates[k] for k in names], color=["#888"] + ["#3a7"] * (len(names) - 1))
    for i, k in enumerate(names):
        ax.text(rates[k], i, f" {rates[k]:,}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("rows/s")
    ax.set_title(f"{data['messages']:,} messages x {data['value_bytes']} B, {data['partitions']} partitions, "
                 f"Spark {data['master']}, {data['brokers']} broker(s)", fontsize=9)
    ax.set_xlim(0, max(rates.values()) * 1.2)
    save_figure(fig, "spark")


if __name__ == "__main__":
    main()
