"""The README's example pipeline, kept as code so that a test runs exactly what the README shows."""

from __future__ import annotations

from typing import Any


def count_per_key(spark: Any, bootstrap: str, topic: str, checkpoint: str) -> Any:
    """Counts messages per key from a stream into the in-memory table `key_counts`."""
    # --- README example start
    counts = (spark.readStream.format("minibroker")
              .option("bootstrap.servers", bootstrap)
              .option("topic", topic)
              .option("startingOffsets", "earliest")
              .load()
              .selectExpr("CAST(key AS STRING) AS key")
              .groupBy("key").count())
    query = (counts.writeStream.outputMode("complete")
             .format("memory").queryName("key_counts")
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()
    spark.table("key_counts").orderBy("key").show()
    # --- README example end
    return query
