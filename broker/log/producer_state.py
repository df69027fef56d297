"""Per-partition producer state for the idempotent producer: pure rules, no I/O, time passed in.

Kafka 2.8's ProducerStateManager / ProducerAppendInfo / ProducerStateEntry, for the
non-transactional case. For each producer id a partition keeps the producer epoch and the
metadata of its last five batches (last sequence, last offset, offset delta, max timestamp).

A client's batch (the leader's produce path) is checked in Kafka's order:

- a batch whose epoch and exact sequence range match one of the last five batches is a
  duplicate: nothing is appended and the client is answered with the original batch's offsets
  (Kafka 2.8 answers NONE with the original base offset, not DUPLICATE_SEQUENCE_NUMBER);
- an epoch below the current one is INVALID_PRODUCER_EPOCH (2.7+ replaced PRODUCER_FENCED here);
- a new epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (KIP-360's bump);
- within an epoch the first sequence must follow the last one (int32 max wraps to 0), else
  OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer id with no state here (never seen, expired, or its batches removed) is accepted
  at any sequence. Kafka 2.8 does the same: since KIP-360 (2.5) the broker no longer answers
  UNKNOWN_PRODUCER_ID on produce, it starts tracking from whatever the producer sends.

A leader's appends in flight (written by the log directory's thread, not yet committed) are
checked against in order: `check_client(..., in_flight)` checks a batch against the entry those
staged appends will leave (`staged_entry`), as if they were committed, which is the state Kafka
would check it against with the appends made one after the other.

Replicated batches (the follower path, and rebuilding from the log) only update the state, with
no checks, as Kafka's AppendOrigin.Replication does.

The snapshot codec is Kafka's `.snapshot` file format, version 1: int16 version, uint32 CRC32C of
everything after it, then an int32 count and one 46-byte entry per producer (producer id, epoch,
last sequence, last offset, offset delta, timestamp, coordinator epoch, transaction first offset),
declared in protocol/layouts.py. As in Kafka a snapshot keeps only the last batch of each
producer, so after a restart a retry of that batch is still recognised.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import crc32c

from protocol.errors import ErrorCode
from protocol.layouts import (
    PRODUCER_SNAPSHOT_CRC_FROM,
    PRODUCER_SNAPSHOT_ENTRY,
    PRODUCER_SNAPSHOT_HEAD,
    RECORD_BATCH_HEADER,
    RECORD_BATCH_HEADER_SIZE,
)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
BATCHES_RETAINED = 5  # Kafka's ProducerStateEntry.NumBatchesToRetain; a client has at most 5 in flight
INT32_MAX = (1 << 31) - 1
SNAPSHOT_VERSION = 1
# Attribute bits of a RecordBatch v2 (Kafka's DefaultRecordBatch).
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment` wrapping past int32 max to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """The inverse of increment_sequence (Kafka's DefaultRecordBatch.decrementSequence)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateError(Exception):
    """A client batch the producer state refuses: Kafka's error code for that partition."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_RETAINED))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int = -1  # always -1 here (no transactions); kept for the snapshot format

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, deque(self.batches, maxlen=BATCHES_RETAINED),
                             self.coordinator_epoch, self.last_timestamp, self.txn_first_offset)

    def apply(self, updated: ProducerEntry) -> None:
        """Take a staged entry's changes (Kafka's ProducerStateEntry.update): its epoch (a new one
        forgets the old batches), its batches after ours (the last five kept), its times."""
        self.set_epoch(updated.epoch)
        self.batches.extend(updated.batches)
        self.coordinator_epoch = updated.coordinator_epoch
        self.last_timestamp = updated.last_timestamp

    def set_epoch(self, epoch: int) -> None:
        # A new epoch (a bump, or a new producer on this id) forgets the old epoch's batches.
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.set_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What the producer state needs of one RecordBatch v2, read from its 61-byte header."""

    producer_id: int
    epoch: int
    base_sequence: int
    last_offset_delta: int  # records_count - 1 for a client's batch
    max_timestamp: int
    attributes: int
    base_offset: int = 0

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


def producer_batches(buf: bytes | memoryview) -> Iterator[ProducerBatch]:
    """The batches of a log slice or record set that carry a producer id (magic 2 only).

    Walks whole entries by their length field; magic 0/1 entries and a torn tail are skipped.
    One small object per batch, none per record.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while pos + RECORD_BATCH_HEADER_SIZE <= end:
        (base_offset, length, _ple, magic, _crc, attributes, last_delta, _first_ts, max_ts,
         pid, epoch, base_seq, _count) = RECORD_BATCH_HEADER.unpack_from(view, pos)
        size = 12 + length
        if length < 0 or pos + size > end:
            return
        if magic >= 2 and pid >= 0:
            yield ProducerBatch(pid, epoch, base_seq, last_delta, max_ts, attributes, base_offset)
        pos += size
    del view


class _Pending:
    """Kafka's ProducerAppendInfo: one producer's batches of one append, checked against the state."""

    __slots__ = ("current", "updated", "client")

    def __init__(self, current: ProducerEntry, client: bool) -> None:
        self.current = current
        self.client = client
        self.updated = ProducerEntry(current.producer_id, current.epoch,
                                     coordinator_epoch=current.coordinator_epoch,
                                     last_timestamp=current.last_timestamp,
                                     txn_first_offset=current.txn_first_offset)

    def append(self, epoch: int, first_seq: int, last_seq: int, first_offset: int, last_offset: int,
               timestamp: int) -> None:
        if self.client:
            self._check(epoch, first_seq, first_offset)
        self.updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, timestamp)

    def _check(self, epoch: int, first_seq: int, offset: int) -> None:
        pid, updated, current = self.current.producer_id, self.updated, self.current
        if epoch < updated.epoch:
            raise ProducerStateError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                     f"producer {pid} epoch {epoch} at offset {offset} is older than "
                                     f"the last seen epoch {updated.epoch}")
        if epoch != updated.epoch:
            if first_seq != 0 and updated.epoch != NO_PRODUCER_EPOCH:
                raise ProducerStateError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                         f"producer {pid} new epoch {epoch} starts at sequence {first_seq}, "
                                         f"not 0 (current epoch {updated.epoch})")
            return
        if updated.batches:
            last_seq = updated.last_seq
        elif epoch == current.epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # No known epoch (state expired or removed): any sequence starts the producer afresh.
        if current.epoch != NO_PRODUCER_EPOCH and not in_sequence(last_seq, first_seq):
            raise ProducerStateError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"producer {pid} sequence {first_seq} at offset {offset} does not "
                                     f"follow {last_seq}")


class ProducerAppend:
    """The producer state changes of one append, checked (client) or not (replication), not yet applied.

    Nothing changes in the partition's state until `ProducerStates.commit`, which the caller runs
    only once the records are in the log: a refused or failed append leaves the state untouched.
    """

    __slots__ = ("states", "client", "pending")

    def __init__(self, states: ProducerStates, client: bool) -> None:
        self.states = states
        self.client = client
        self.pending: dict[int, _Pending] = {}

    def add(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
            last_offset: int, timestamp: int, current: ProducerEntry | None = None) -> None:
        """Stage one batch; ProducerStateError if a client's batch breaks the rules. `current`:
        the producer's entry to check against (a staged view, ProducerStates.staged_entry), else
        the committed one."""
        p = self.pending.get(producer_id)
        if p is None:
            if current is None:
                current = self.states.producers.get(producer_id) or ProducerEntry(producer_id)
            p = self.pending[producer_id] = _Pending(current, self.client)
        p.append(epoch, first_seq, last_seq, first_offset, last_offset, timestamp)

    def add_batch(self, batch: ProducerBatch, current: ProducerEntry | None = None) -> None:
        self.add(batch.producer_id, batch.epoch, batch.base_sequence, batch.last_sequence,
                 batch.base_offset, batch.last_offset, batch.max_timestamp, current)


class ProducerStates:
    """One partition's producer table (Kafka's ProducerStateManager, without transactions).

    `map_end_offset` is the log offset up to which the table reflects the log: batches below it
    are in the table, and a snapshot written now is named after it.
    """

    def __init__(self, expiration_ms: int, map_end_offset: int = 0) -> None:
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = map_end_offset

    def __len__(self) -> int:
        return len(self.producers)

    # ---- the leader: checks ---------------------------------------------------------------

    def find_duplicate(self, batch: ProducerBatch) -> BatchMetadata | None:
        """The retained batch a client's batch repeats exactly (same epoch and sequence range), if any."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            return None
        return entry.find_duplicate(batch.epoch, batch.base_sequence, batch.last_sequence)

    def staged_entry(self, producer_id: int, in_flight: Sequence[ProducerAppend] = ()) -> ProducerEntry | None:
        """The producer's entry as it will be once `in_flight` (appends checked and not yet
        committed, in the order they will commit) are committed: the committed entry itself when
        none of them is this producer's, else a copy with theirs applied. None: no state."""
        committed = self.producers.get(producer_id)
        view: ProducerEntry | None = None
        for append in in_flight:
            p = append.pending.get(producer_id)
            if p is None:
                continue
            if view is None:
                view = committed.copy() if committed is not None else ProducerEntry(producer_id)
            view.apply(p.updated)
        return committed if view is None else view

    def check_client(self, batches: Iterable[ProducerBatch], base_offset: int,
                     in_flight: Sequence[ProducerAppend] = ()) -> ProducerAppend | BatchMetadata:
        """Check a client's batches as they would be appended at `base_offset`, after the
        appends `in_flight` (checked, not yet committed: see `staged_entry`).

        Returns the original batch when the first one is a duplicate (answer with its offsets,
        append nothing; it may be one of `in_flight`'s), else the staged changes to commit after
        the append; raises ProducerStateError (Kafka's error code for the partition) if any
        batch is refused.
        """
        append = ProducerAppend(self, client=True)
        offset = base_offset
        for b in batches:
            current = self.staged_entry(b.producer_id, in_flight)
            dup = None if current is None else current.find_duplicate(b.epoch, b.base_sequence, b.last_sequence)
            if dup is not None:
                return dup
            placed = ProducerBatch(b.producer_id, b.epoch, b.base_sequence, b.last_offset_delta,
                                   b.max_timestamp, b.attributes, offset)
            append.add_batch(placed, current)
            offset = placed.last_offset + 1
        return append

    # ---- applying -------------------------------------------------------------------------

    def commit(self, append: ProducerAppend, end_offset: int) -> None:
        """Apply staged changes (their records are in the log, which now ends at `end_offset`)."""
        for pid, p in append.pending.items():
            entry = self.producers.get(pid)
            if entry is None:
                self.producers[pid] = p.updated
            else:
                entry.apply(p.updated)
        self.map_end_offset = max(self.map_end_offset, end_offset)

    def replicate(self, batches: Iterable[ProducerBatch], end_offset: int) -> None:
        """Batches appended without checks (follower fetch, log rebuild): update the table."""
        append: ProducerAppend | None = None
        for b in batches:
            if append is None:
                append = ProducerAppend(self, client=False)
            append.add_batch(b)
        if append is None:
            # No batch with a producer id (a plain producer's, every round of a follower's
            # replication): only the map end moves, as commit would move it.
            self.map_end_offset = max(self.map_end_offset, end_offset)
            return
        self.commit(append, end_offset)

    # ---- expiry ---------------------------------------------------------------------------

    def is_expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        return entry.txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for `expiration_ms` (by their last batch's max timestamp); how many went."""
        gone = [pid for pid, e in self.producers.items() if self.is_expired(e, now_ms)]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def clear(self, map_end_offset: int) -> None:
        self.producers.clear()
        self.map_end_offset = map_end_offset

    # ---- snapshots ------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The table in Kafka's producer snapshot format (version 1, CRC32C)."""
        body = bytearray(PRODUCER_SNAPSHOT_HEAD.size)
        body += len(self.producers).to_bytes(4, "big", signed=True)
        for pid, e in self.producers.items():
            body += PRODUCER_SNAPSHOT_ENTRY.pack(pid, e.epoch, e.last_seq, e.last_offset, e.last_offset_delta,
                                                e.last_timestamp, e.coordinator_epoch, e.txn_first_offset)
        crc = crc32c.crc32c(memoryview(body)[PRODUCER_SNAPSHOT_CRC_FROM:])
        PRODUCER_SNAPSHOT_HEAD.pack_into(body, 0, SNAPSHOT_VERSION, crc)
        return bytes(body)

    def load_snapshot(self, data: bytes, offset: int, now_ms: int) -> None:
        """Replace the table with a snapshot's (expired producers left out); CorruptSnapshot if it is bad."""
        producers = {e.producer_id: e for e in decode_snapshot(data) if not self.is_expired(e, now_ms)}
        self.producers = producers
        self.map_end_offset = offset


class CorruptSnapshot(ValueError):
    pass


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    head = PRODUCER_SNAPSHOT_HEAD
    if len(data) < head.size + 4:
        raise CorruptSnapshot(f"snapshot of {len(data)} bytes is too short")
    version, crc = head.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(f"unknown snapshot version {version}")
    computed = crc32c.crc32c(memoryview(data)[PRODUCER_SNAPSHOT_CRC_FROM:])
    if crc != computed:
        raise CorruptSnapshot(f"snapshot CRC {crc} does not match computed {computed}")
    count = int.from_bytes(data[head.size:head.size + 4], "big", signed=True)
    entry = PRODUCER_SNAPSHOT_ENTRY
    pos = head.size + 4
    if count < 0 or len(data) != pos + count * entry.size:
        raise CorruptSnapshot(f"snapshot holds {len(data) - pos} bytes for {count} entries")
    out: list[ProducerEntry] = []
    for _ in range(count):
        pid, epoch, seq, last_offset, delta, ts, coord_epoch, txn_first = entry.unpack_from(data, pos)
        pos += entry.size
        e = ProducerEntry(pid, epoch, coordinator_epoch=coord_epoch, last_timestamp=ts,
                          txn_first_offset=txn_first)
        if last_offset >= 0:
            e.batches.append(BatchMetadata(seq, last_offset, delta, ts))
        out.append(e)
    return out
