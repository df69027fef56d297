"""Where a partition's log lives: `<log dir>/<topic>-<partition>`, and nowhere else.

Every path from the wire to the filesystem goes through `partition_dir`, which refuses a
name Kafka would refuse and then checks the resolved path is a direct child of the log
dir. The second check is defence in depth: a caller that forgot to validate, or a
symlinked partition directory, still cannot make the broker create or delete anything
outside `log.dirs`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from broker.log.errors import LogError
from protocol.topic import topic_name_error


class InvalidPartitionName(LogError, ValueError):
    """A topic or partition that cannot name a directory inside the log dir."""


@functools.lru_cache(maxsize=16)
def _resolved(log_dir: str) -> Path:
    """The log dir's real path (resolved once: it is one of log.dirs, fixed for the process)."""
    return Path(log_dir).resolve()


def partition_dir(log_dir: Path, topic: str, partition: int) -> Path:
    """The directory of (topic, partition) in `log_dir`; InvalidPartitionName if it would be anywhere else."""
    error = topic_name_error(topic)
    if error is not None:
        raise InvalidPartitionName(error)
    if partition < 0:
        raise InvalidPartitionName(f"partition {partition} of topic {topic} is negative")
    name = f"{topic}-{partition}"
    root = _resolved(str(log_dir))
    child = os.path.join(root, name)
    # A legal name is one plain component, so only a symlink can resolve elsewhere: one lstat
    # instead of a realpath of every component (10,000 of them at a restart), and paths made
    # only for a link.
    if os.path.islink(child):
        resolved = Path(child).resolve()
        if resolved.parent != root or resolved.name != name:
            raise InvalidPartitionName(f"{name} does not resolve to a directory directly inside {root}")
    return (log_dir if isinstance(log_dir, Path) else Path(log_dir)) / name


__all__ = ["InvalidPartitionName", "partition_dir"]
