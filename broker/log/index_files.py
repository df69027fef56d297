"""Segments whose index files are not made yet, for the broker's background pass.

A new segment's `.index` and `.timeindex` are not created with it (two file creations per new
partition, ~0.3-0.6 ms of kernel time each on this machine's ext4 when loaded): the replica
manager's background pass makes them empty (`Segment.make_files`), and the segment's first
`write_indexes` (roll, flush, close) makes whatever is still missing when it has something to
write. An empty segment never needs them: its missing files are equivalent to empty ones, so a
shutdown creates none for it and an open takes it as it is (broker.log.segment, broker.log.log).

A segment registers here when it is created; one opened empty with neither file at its first
append, and one whose files a clean close left out (broker.log.segment) at its first index point,
from when its close must make them (registering those at the open would make their files during
the start-up, 20,000 file creations competing with it at 10,000 partitions, for segments that may
never need them); so the pass knows what is pending without walking every partition: with 10,000 partitions that walk cost
~1 ms of the event loop every pass, with nothing to do. Segments are registered by whichever
thread builds or appends to them and taken by the loop: one lock guards the set.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.log.segment import Segment


class PendingIndexFiles:
    """Segments that may still lack their index files, oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._segments: dict[Segment, None] = {}  # insertion-ordered: the oldest are made first

    def add(self, segment: Segment) -> None:
        with self._lock:
            self._segments[segment] = None

    def add_all(self, segments: list[Segment]) -> None:
        """Put back what a pass took and did not make (out of descriptors: tried again next pass)."""
        with self._lock:
            for seg in segments:
                self._segments[seg] = None

    def take(self) -> list[Segment]:
        """Every segment registered since the last take; the set is left empty."""
        with self._lock:
            taken = list(self._segments)
            self._segments.clear()
        return taken

    def __len__(self) -> int:
        return len(self._segments)  # a dict's len is atomic: no lock for the idle pass's check


def make_index_files(segments: list[Segment]) -> tuple[int, OSError | None]:
    """`make_files` for each segment in order, on a worker thread: how many were done before an
    error, and the error (None if all were)."""
    for done, seg in enumerate(segments):
        try:
            seg.make_files()
        except OSError as e:
            return done, e
    return len(segments), None
