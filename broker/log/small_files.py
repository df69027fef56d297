"""Whole small files (index, checkpoint and snapshot files) read at a log's open.

A restart of 10,000 partitions reads a few such files per partition on the load threads, where
pathlib's `read_text` / `read_bytes` (an io object, a text decoder, path objects) cost more than
the reads: one descriptor, an fstat and preads are all it takes. Raises FileNotFoundError as
`open` does; `None` where the file shrank under the read (a torn file: the caller's business).
"""

from __future__ import annotations

import os


def read_small(path: str | os.PathLike[str]) -> bytes | None:
    """The whole file at `path` through a short-lived descriptor; None if it ends early."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        raw = os.pread(fd, size, 0) if size else b""
        while len(raw) < size:
            chunk = os.pread(fd, size - len(raw), len(raw))
            if not chunk:
                return None
            raw += chunk
        return raw
    finally:
        os.close(fd)
