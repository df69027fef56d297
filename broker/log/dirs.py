"""Where a partition's log lives: `<log dir>/<topic>-<partition>`, and nowhere else.

Every path from the wire to the filesystem goes through `partition_dir`, which refuses a
name Kafka would refuse and then checks the resolved path is a direct child of the log
dir. The second check is defence in depth: a caller that forgot to validate, or a
symlinked partition directory, still cannot make the broker create or delete anything
outside `log.dirs`.
"""

from __future__ import annotations

from pathlib import Path

from broker.log.errors import LogError
from protocol.topic import topic_name_error


class InvalidPartitionName(LogError, ValueError):
    """A topic or partition that cannot name a directory inside the log dir."""


def partition_dir(log_dir: Path, topic: str, partition: int) -> Path:
    """The directory of (topic, partition) in `log_dir`; InvalidPartitionName if it would be anywhere else."""
    error = topic_name_error(topic)
    if error is not None:
        raise InvalidPartitionName(error)
    if partition < 0:
        raise InvalidPartitionName(f"partition {partition} of topic {topic} is negative")
    name = f"{topic}-{partition}"
    root = Path(log_dir).resolve()
    resolved = (root / name).resolve()
    if resolved.parent != root or resolved.name != name:
        raise InvalidPartitionName(f"{name} does not resolve to a directory directly inside {root}")
    return Path(log_dir) / name


__all__ = ["InvalidPartitionName", "partition_dir"]
