"""`cleaner-offset-checkpoint`: each compacted log's first dirty offset, per log directory.

Kafka's OffsetCheckpointFile format: a version line (0), a count line, then one
`topic partition offset` line per log. Written to a temporary file, fsynced and renamed over the
old one, so a crash leaves one whole file or the other. A file that does not parse is ignored
(every log is then dirty from its start, which costs a pass and loses nothing).
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_NAME = "cleaner-offset-checkpoint"


def read(log_dir: Path) -> dict[tuple[str, int], int]:
    try:
        lines = (log_dir / FILE_NAME).read_text().splitlines()
    except OSError:
        return {}
    out: dict[tuple[str, int], int] = {}
    try:
        if lines[0].strip() != "0" or int(lines[1]) != len(lines) - 2:
            return {}
        for line in lines[2:]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError):
        return {}
    return out


def write(log_dir: Path, offsets: dict[tuple[str, int], int]) -> None:
    rows = [f"{t} {p} {o}\n" for (t, p), o in sorted(offsets.items())]
    path = log_dir / FILE_NAME
    tmp = path.with_name(FILE_NAME + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"0\n{len(rows)}\n{''.join(rows)}".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
