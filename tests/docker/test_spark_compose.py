"""`docker compose --profile spark up`: a Spark master and worker beside the three brokers run a pipeline.

The Spark image is docker/Dockerfile.spark on the project's image (SPARK=1 docker/build-images.sh;
pyspark from the wheelhouse). A job submitted on the master container writes rows with the
sink, reads them back with a batch read, and runs a stream -> stream query through the sink;
the host reads the output topic through the EXTERNAL listener with confluent-kafka.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.compose import ComposeCluster, build_image
from tests.support.ports import free_port
from tests.support.readback import read_topic

pytestmark = pytest.mark.docker

JOB = """
from pyspark.sql import SparkSession
from pipeline import register
spark = SparkSession.builder.master("spark://spark-master:7077").appName("compose-pipeline").getOrCreate()
register(spark)
servers = "broker1:9092,broker2:9092,broker3:9092"
rows = spark.range(0, 5000, 1, 4).selectExpr("CAST(id % 50 AS STRING) AS key", "concat('row-', id) AS value")
rows.write.format("minibroker").option("bootstrap.servers", servers).option("topic", "compose-in").mode("append").save()
n = spark.read.format("minibroker").option("bootstrap.servers", servers).option("topic", "compose-in").load().count()
q = (spark.readStream.format("minibroker").option("bootstrap.servers", servers).option("topic", "compose-in")
     .option("startingOffsets", "earliest").load()
     .selectExpr("key", "upper(CAST(value AS STRING)) AS value",
                 "array(named_struct('key', 'src', 'value', CAST(concat(partition, ':', offset) AS BINARY))) AS headers")
     .writeStream.format("minibroker").option("bootstrap.servers", servers).option("topic", "compose-out")
     .option("checkpointLocation", "/var/lib/spark/checkpoints/compose-out").trigger(availableNow=True).start())
q.awaitTermination()
print("READ", n, "STREAMED", sum(p["numInputRows"] for p in q.recentProgress))
spark.stop()
"""


@pytest.fixture
def spark_compose(compose_image: str, tmp_path: Path) -> Iterator[ComposeCluster]:
    env = dict(os.environ, SPARK="1")
    r = subprocess.run([str(Path(__file__).resolve().parents[2] / "docker" / "build-images.sh")], env=env,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    cluster = ComposeCluster(build_image(), tmp_path)
    cluster.env["MINIBROKER_SPARK_IMAGE"] = "minibroker-spark:latest"
    cluster.env["MINIBROKER_SPARK_UI_PORT"] = str(free_port())
    try:
        cluster.compose("--profile", "spark", "up", "-d", "--no-build")
        cluster.wait_healthy(["broker1", "broker2", "broker3", "spark-master"], timeout=300)
        yield cluster
    finally:
        cluster.compose("--profile", "spark", "down", "-v", "--remove-orphans", "-t", "5", check=False)
        cluster.down()


def test_compose_spark_profile_runs_the_pipeline(spark_compose: ComposeCluster) -> None:
    cluster = spark_compose
    for topic in ("compose-in", "compose-out"):
        cluster.exec("broker1", "minibroker", "topics", "--bootstrap-server", "broker1:9092", "--create",
                     "--topic", topic, "--partitions", "3", "--replication-factor", "3")
    r = subprocess.run(["docker", "exec", "-i", cluster.container("spark-master"), "python", "-"], input=JOB,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-5000:]
    assert "READ 5000 STREAMED 5000" in r.stdout
    out = read_topic(cluster.bootstrap, "compose-out", 3)
    assert sorted(v for *_, v, _ in out) == sorted(f"ROW-{i}".encode() for i in range(5000))
    assert all(len(h) == 1 and h[0][0] == "src" for *_, h in out)
