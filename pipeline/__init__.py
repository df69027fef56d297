"""PySpark data source `minibroker`: read and write minibroker topics from Spark 4 without JVM jars.

Spark's own Kafka connector is a JVM package; this one uses Spark 4's Python Data Source API
and the project's own protocol code, so `pip install -e '.[spark]'` is all a job needs:

    from pipeline import register
    register(spark)
    spark.read.format("minibroker").option("bootstrap.servers", "127.0.0.1:9092").option("topic", "t").load()

See docs/pyspark.md for options and limitations.
"""

from __future__ import annotations

from typing import Any

from pipeline.client import MinibrokerError

__all__ = ["MinibrokerDataSource", "MinibrokerError", "register"]


def register(spark: Any) -> None:
    """Makes `format("minibroker")` known to `spark` (a SparkSession)."""
    from pipeline.source import MinibrokerDataSource

    spark.dataSource.register(MinibrokerDataSource)


def __getattr__(name: str) -> Any:
    # pyspark is an optional extra: import it only when the data source itself is asked for.
    if name == "MinibrokerDataSource":
        from pipeline.source import MinibrokerDataSource

        return MinibrokerDataSource
    raise AttributeError(name)
