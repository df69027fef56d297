"""The driver of tests/spark/test_standalone_cluster.py, run as its own process (one SparkContext each).

    python -m tests.spark.cluster_job MASTER_URL BOOTSTRAP WORKDIR batch TOPIC
        reads TOPIC whole with spark.read, writes its rows as JSON lines to WORKDIR/batch.jsonl
    python -m tests.spark.cluster_job MASTER_URL BOOTSTRAP WORKDIR stream SRC DST
        runs SRC -> DST (checkpoint WORKDIR/checkpoint) with a processing-time trigger (touching
        WORKDIR/running once a batch with rows is done) until
        WORKDIR/stop names end offsets of SRC (JSON {"partition": offset}) and the query has
        committed a batch that reaches them; then stops it and exits
    python -m tests.spark.cluster_job MASTER_URL BOOTSTRAP WORKDIR catch-up SRC DST
        the same query from its checkpoint with trigger(availableNow=True)

The transform keeps the key, upper-cases the value and adds a header `src` = "partition:offset"
of the input row, so the test can trace every output row back to its input.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def session(master: str, workdir: Path) -> Any:  # noqa: ANN401
    from pyspark.sql import SparkSession

    from pipeline import register

    spark = (SparkSession.builder.master(master).appName("minibroker-cluster-test")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "512m")
             .config("spark.executor.memory", "512m")
             .config("spark.executor.cores", "1")
             .config("spark.cores.max", "2")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", str(workdir / "driver-local"))
             .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    # Both workers' executors, before any job: the test checks work ran on the cluster's two.
    deadline = time.monotonic() + 180
    while executors(spark) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {executors(spark)} executors registered")
        time.sleep(0.5)
    return spark


def executors(spark: Any) -> int:  # noqa: ANN401
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # noqa: SLF001 (less the driver)


def batch(spark: Any, bootstrap: str, workdir: Path, topic: str) -> None:  # noqa: ANN401
    df = spark.read.format("minibroker").option("bootstrap.servers", bootstrap).option("topic", topic).load()
    with (workdir / "batch.jsonl").open("w") as out:
        for r in df.select("partition", "offset", "key", "value").toLocalIterator():
            out.write(json.dumps([r["partition"], r["offset"], bytes(r["key"]).decode(),
                                  bytes(r["value"]).decode()]) + "\n")
    (workdir / "batch.meta").write_text(json.dumps({"partitions": df.rdd.getNumPartitions(),
                                                    "executors": executors(spark)}))


def pipeline(spark: Any, bootstrap: str, workdir: Path, src: str, dst: str, **trigger: Any) -> Any:  # noqa: ANN401
    stream = (spark.readStream.format("minibroker").option("bootstrap.servers", bootstrap)
              .option("topic", src).option("startingOffsets", "earliest").load()
              .selectExpr("key", "upper(CAST(value AS STRING)) AS value",
                          "array(named_struct('key', 'src', 'value', "
                          "CAST(concat(partition, ':', offset) AS BINARY))) AS headers"))
    return (stream.writeStream.format("minibroker").option("bootstrap.servers", bootstrap).option("topic", dst)
            .option("checkpointLocation", str(workdir / "checkpoint")).trigger(**trigger).start())


def reached(progress: dict, src: str, target: dict[str, int]) -> bool:
    ends = progress["sources"][0]["endOffset"] if progress.get("sources") else None
    if isinstance(ends, str):
        ends = json.loads(ends)
    got = (ends or {}).get(src, {})
    return all(int(got.get(p, -1)) >= o for p, o in target.items())


def stream(spark: Any, bootstrap: str, workdir: Path, src: str, dst: str) -> None:  # noqa: ANN401
    query = pipeline(spark, bootstrap, workdir, src, dst, processingTime="1 second")
    stop_file = workdir / "stop"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if any(p["numInputRows"] for p in query.recentProgress):
            (workdir / "running").touch()  # the test feeds the source only from now on
        if stop_file.exists():
            target = json.loads(stop_file.read_text())
            # A progress report comes after its batch is committed (sink written, commit log entry).
            if any(reached(p, src, target) for p in query.recentProgress):
                query.stop()
                (workdir / "stream.meta").write_text(json.dumps(
                    {"batches": len(query.recentProgress),
                     "rows": sum(p["numInputRows"] for p in query.recentProgress)}))
                return
        time.sleep(0.5)
    raise RuntimeError("the stream never reached the offsets in the stop file")


def catch_up(spark: Any, bootstrap: str, workdir: Path, src: str, dst: str) -> None:  # noqa: ANN401
    query = pipeline(spark, bootstrap, workdir, src, dst, availableNow=True)
    if not query.awaitTermination(600):
        raise RuntimeError("the availableNow run did not finish")
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    (workdir / "catch-up.meta").write_text(json.dumps(
        {"rows": sum(p["numInputRows"] for p in query.recentProgress)}))


def main(argv: list[str]) -> None:
    master, bootstrap, workdir_text, action, *topics = argv
    workdir = Path(workdir_text)
    spark = session(master, workdir)
    try:
        if action == "batch":
            batch(spark, bootstrap, workdir, *topics)
        elif action == "stream":
            stream(spark, bootstrap, workdir, *topics)
        elif action == "catch-up":
            catch_up(spark, bootstrap, workdir, *topics)
        else:
            raise SystemExit(f"unknown action {action!r}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
