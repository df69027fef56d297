"""A streaming query's lag from its StreamingQueryProgress, as Spark's Kafka source reports it.

Spark's Kafka source puts `minOffsetsBehindLatest`, `maxOffsetsBehindLatest` and
`avgOffsetsBehindLatest` into each progress's `sources[i].metrics` (KafkaMicroBatchStream.metrics:
per partition, the latest available offset minus the batch's end offset). A Python data source
cannot: in pyspark 4.x the JVM side of a Python stream (PythonMicroBatchStream and its
admission-control variant) does not implement ReportsSourceMetrics, and the Python
DataSourceStreamReader has no method for metrics, so `metrics` stays empty. What it can report
is `reportLatestOffset()` (pyspark 4.2+), which Spark shows as the source's `latestOffset`; the
minibroker source reports every partition's high watermark there. This module computes Spark's
three figures from `endOffset` and `latestOffset`, the same arithmetic on the same offsets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

MIN, MAX, AVG = "minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest"


def _doc(value: Any) -> dict[str, dict[str, int]] | None:
    if value is None:
        return None
    doc = json.loads(value) if isinstance(value, str) else value
    return doc if isinstance(doc, dict) and doc else None


def offsets_behind_latest(source: Any) -> dict[str, str]:
    """Spark's three lag metrics (as strings, like SourceProgress.metrics) for one SourceProgress
    (pyspark's object, or its JSON dict); {} when the progress has no latestOffset or endOffset,
    as Spark's Kafka source reports nothing then."""
    get: Callable[[str], Any] = source.get if isinstance(source, Mapping) else lambda name: getattr(source, name, None)
    latest, end = _doc(get("latestOffset")), _doc(get("endOffset"))
    if latest is None or end is None:
        return {}
    behind = [int(offset) - int(end.get(topic, {}).get(p, 0))
              for topic, parts in latest.items() for p, offset in parts.items()]
    if not behind:
        return {}
    # Spark formats a Scala Long and a Double (e.g. "2.5", "3.0").
    return {MIN: str(min(behind)), MAX: str(max(behind)), AVG: repr(float(sum(behind) / len(behind)))}
