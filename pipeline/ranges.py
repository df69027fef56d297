"""How a batch's offset ranges become Spark tasks: Spark's KafkaOffsetRangeCalculator (`minPartitions`).

Pure: ranges in, ranges out. Without `minPartitions`, or when the ranges with data already
number at least `minPartitions`, each topic partition's range is one task. Otherwise ranges are
split in proportion to their size: a range gets round(size / total * minPartitions) parts
(at least 1; Scala's Math.round, i.e. halves round up), ranges left whole are taken out of the
share of the others, and each split range is cut into near-equal pieces whose last piece takes
the remainder of the integer division. Empty ranges produce no task once splitting applies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple


class Range(NamedTuple):
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def _part_count(size: int, total: int, min_parts: int) -> int:
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(ranges: Sequence[Range], min_partitions: int | None) -> list[Range]:
    """Spark's KafkaOffsetRangeCalculator.getRanges: `ranges` cut so there are about `min_partitions`."""
    if min_partitions is None:
        return list(ranges)
    with_data = [r for r in ranges if r.size > 0]
    if len(with_data) >= min_partitions:
        return with_data
    total = sum(r.size for r in with_data)
    whole = {(r.topic, r.partition) for r in with_data if _part_count(r.size, total, min_partitions) == 1}
    whole_size = sum(r.size for r in with_data if (r.topic, r.partition) in whole)
    split_total = total - whole_size
    split_min = max(min_partitions - len(whole), 1)
    out: list[Range] = []
    for r in with_data:
        parts = 1 if (r.topic, r.partition) in whole else _part_count(r.size, split_total, split_min)
        remaining, start = r.size, r.start
        for part in range(parts):
            piece = remaining // (parts - part)
            remaining -= piece
            end = min(start + piece, r.end)
            if end > start:
                out.append(Range(r.topic, r.partition, start, end))
            start = end
    return out
