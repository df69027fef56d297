"""A partition's leader epochs: which epoch's leader wrote from which offset on (KIP-101, KIP-279).

Kafka 2.8's LeaderEpochFileCache semantics, as pure logic: no file, no clock, no lock (the
broker's event loop is the one writer). `LeaderEpochFile` (leader_epoch_checkpoint.py) keeps it
on disk; every mutating method here returns whether anything changed, so that the owner writes
the checkpoint only then, as Kafka's `flush()` calls do.

Entries are (epoch, start offset) with both strictly increasing: `assign` of an entry that
breaks that order removes the conflicting later entries first (Kafka's
maybeTruncateNonMonotonicEntries), so the log and its epochs can never disagree about order.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import NamedTuple

# Kafka: OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries:
            self.assign(epoch, start)

    # ---- reading ---------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts, strict=True)]

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._starts[-1]) if self._epochs else None

    @property
    def latest_epoch(self) -> int | None:
        """The latest epoch with messages (or, on a leader, the one being written to)."""
        return self._epochs[-1] if self._epochs else None

    @property
    def previous_epoch(self) -> int | None:
        return self._epochs[-2] if len(self._epochs) > 1 else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._starts[0]) if self._epochs else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for a requested epoch: KIP-279's answer to OffsetForLeaderEpoch.

        The epoch is the largest known epoch <= the requested one; its end offset is the start
        offset of the first larger epoch, or the log end offset if it is the latest. A requested
        epoch below every known one answers (requested, first start offset): the data before it
        is gone and the follower should start from there. UNDEFINED_EPOCH requested, an empty
        cache or an epoch above the latest answer (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose leader wrote `offset` (the last entry starting at or before it), if known."""
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else None

    # ---- changing --------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; once assigned an epoch's start does not move
        later. True if the entries changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid partition leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        # Drop every later entry that the new one contradicts: not both epoch and start lower.
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Remove every entry starting at or after `end_offset` (the log was truncated to it)."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return False
        keep = bisect_left(self._starts, end_offset)
        del self._epochs[keep:]
        del self._starts[keep:]
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget entries before `start_offset` (the log start moved): the last entry starting at or
        before it is kept, moved to start there. Exclusive: an entry at `start_offset` stays as is."""
        # Kafka's truncateFromStart acts only when the earliest entry starts below the new start:
        # an entry already at it changes nothing, and reporting a change there made every open of
        # a log starting at 0 rewrite and fsync its checkpoint (10,000 of them at a restart).
        if not self._starts or self._starts[0] >= start_offset:
            return False
        removed = bisect_right(self._starts, start_offset)
        epoch = self._epochs[removed - 1]
        del self._epochs[:removed]
        del self._starts[:removed]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        return True

    def clear(self) -> bool:
        changed = bool(self._epochs)
        self._epochs.clear()
        self._starts.clear()
        return changed

    def __repr__(self) -> str:
        return f"LeaderEpochCache({[(e, s) for e, s in zip(self._epochs, self._starts, strict=True)]})"
