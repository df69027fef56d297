"""An idempotent producer's batches in flight on one partition (ReplicaManager.submit_append):
each later batch is checked against the producer state the earlier ones will leave and queued
behind them at once, with Kafka's answers for retries, gaps and epochs, and nothing of a batch
visible, its state included, unless every batch before it was written.

The writer thread is held off the queue by holding its condition's lock on the loop thread (an
RLock: the loop's own submissions re-enter it), so the batches are certainly in flight while the
later ones are checked."""

from __future__ import annotations

import asyncio
import resource
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker.log.log import Log
from broker.log.writer import PendingAppend
from broker.replication import replica_manager
from broker.replication.replica_manager import LeaderAppend, Partition, ReplicaManager
from protocol.errors import ErrorCode
from protocol.records.record_batch import build_batch
from tests.support.replica_managers import standalone_replica_manager

PID = 4000


@pytest.fixture
def rm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReplicaManager:
    # Every append through the writer thread (small ones are otherwise written inline).
    monkeypatch.setattr(replica_manager, "INLINE_APPEND_BYTES", 0)
    return standalone_replica_manager(tmp_path / "logs")


def batch(seq: int, count: int = 2, epoch: int = 0, pid: int = PID, value_size: int = 2) -> memoryview:
    now = int(time.time() * 1000)
    data = build_batch([(now, None, b"v" * value_size, []) for _ in range(count)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)
    return memoryview(bytearray(data))


@contextmanager
def writer_held(rm: ReplicaManager) -> Iterator[None]:
    """The writer thread takes nothing off its queue while this is held (see the module docstring)."""
    with rm.writer._cond:
        yield


async def submit(rm: ReplicaManager, part: Partition, data: memoryview) -> asyncio.Future[LeaderAppend]:
    """submit_append, which returns once the batch is numbered and queued: it must never wait for
    an earlier batch to be written (bounded, so a regression fails rather than hangs the test)."""
    return await asyncio.wait_for(rm.submit_append(part, data, acks=1), 5)


def leader(rm: ReplicaManager) -> Partition:
    return rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)


def offsets(result: LeaderAppend) -> tuple[ErrorCode, int, int]:
    return result.error_code, result.base_offset, result.last_offset


def committed(part: Partition) -> tuple[int, int, int] | None:
    """The producer's committed (epoch, last sequence, batches retained), None without state."""
    assert part.producers is not None
    entry = part.producers.states.producers.get(PID)
    return None if entry is None else (entry.epoch, entry.last_seq, len(entry.batches))


async def test_five_batches_in_flight_from_one_producer_are_queued_at_once_and_succeed_in_order(
        rm: ReplicaManager) -> None:
    part = leader(rm)
    with writer_held(rm):
        answers = [await submit(rm, part, batch(2 * i)) for i in range(5)]
        # All five numbered and queued behind each other, none written, nothing of them visible.
        assert part.log.appends_in_flight == 5 and part.log.next_offset == 10
        assert part.log_end_offset == 0 and part.high_watermark == 0
        assert committed(part) is None and not any(a.done() for a in answers)
    results = [await asyncio.wait_for(a, 10) for a in answers]
    assert [offsets(r) for r in results] == [(ErrorCode.NONE, 2 * i, 2 * i + 1) for i in range(5)]
    assert part.log_end_offset == 10 and part.high_watermark == 10
    assert committed(part) == (0, 9, 5)
    assert part.producer_appends == {}
    await rm.writer.close()


async def test_a_retry_of_a_batch_in_flight_gets_its_offsets_once_it_is_written(rm: ReplicaManager) -> None:
    part = leader(rm)
    with writer_held(rm):
        first = await submit(rm, part, batch(0))
        second = await submit(rm, part, batch(2, count=3))
        retry_first = await submit(rm, part, batch(0))
        retry_second = await submit(rm, part, batch(2, count=3))
        # Nothing appended for the retries, and not answered before the originals are written.
        assert part.log.next_offset == 5 and part.log.appends_in_flight == 2
        assert not retry_first.done() and not retry_second.done()
    results = [await asyncio.wait_for(a, 10) for a in (first, second, retry_first, retry_second)]
    assert [offsets(r) for r in results] == [(ErrorCode.NONE, 0, 1), (ErrorCode.NONE, 2, 4),
                                             (ErrorCode.NONE, 0, 1), (ErrorCode.NONE, 2, 4)]
    assert part.log_end_offset == 5 and committed(part) == (0, 4, 2)
    # Written now: a retry is answered at once from the committed state, as before.
    again = await submit(rm, part, batch(2, count=3))
    assert again.done() and offsets(again.result()) == (ErrorCode.NONE, 2, 4)
    await rm.writer.close()


async def test_a_gap_or_an_overlap_behind_a_batch_in_flight_is_out_of_order_at_once(rm: ReplicaManager) -> None:
    part = leader(rm)
    with writer_held(rm):
        first = await submit(rm, part, batch(0, count=3))  # sequences 0-2
        gap = await submit(rm, part, batch(5))
        overlap = await submit(rm, part, batch(1, count=3))  # not a whole earlier batch
        for refused in (gap, overlap):
            assert refused.done() and refused.result().error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert part.log.next_offset == 3 and part.log.appends_in_flight == 1
        follows = await submit(rm, part, batch(3))  # the refusals changed nothing staged
    assert offsets(await asyncio.wait_for(first, 10)) == (ErrorCode.NONE, 0, 2)
    assert offsets(await asyncio.wait_for(follows, 10)) == (ErrorCode.NONE, 3, 4)
    assert committed(part) == (0, 4, 2)
    await rm.writer.close()


async def test_a_failed_write_fails_the_batches_checked_behind_it_and_leaves_no_state(
        rm: ReplicaManager) -> None:
    part = leader(rm)
    ok = await submit(rm, part, batch(0))
    assert offsets(await asyncio.wait_for(ok, 10)) == (ErrorCode.NONE, 0, 1)
    assert committed(part) == (0, 1, 1)
    limit = 256 << 10  # regular files may not grow past 256 KiB: the big batch fails part way (EFBIG)
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        with writer_held(rm):
            big = await submit(rm, part, batch(2, count=1, value_size=512 << 10))
            behind = await submit(rm, part, batch(3))  # checked against the big one
            retry = await submit(rm, part, batch(2, count=1, value_size=512 << 10))
            assert part.log.next_offset == 5 and part.log.appends_in_flight == 2
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
        results = [await asyncio.wait_for(a, 10) for a in (big, behind, retry)]
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert [r.error_code for r in results] == [ErrorCode.KAFKA_STORAGE_ERROR] * 3
    # Nothing of either is visible, and the producer state is where the last written batch left it.
    assert part.log_end_offset == 2 and part.log.next_offset == 2 and part.high_watermark == 2
    assert committed(part) == (0, 1, 1)
    assert rm.log_dir_offline and part.offline and part.producer_appends == {}
    late = await submit(rm, part, batch(2))
    assert (await late).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    await rm.writer.close()


async def test_an_epoch_bump_behind_a_batch_in_flight(rm: ReplicaManager) -> None:
    part = leader(rm)
    with writer_held(rm):
        old = await submit(rm, part, batch(0, epoch=0))
        bumped = await submit(rm, part, batch(0, epoch=1))  # a new epoch starts at 0
        # Against the bumped epoch in flight: the old epoch is fenced (a retry of the old batch
        # included: it no longer counts as a duplicate), a new epoch must start at 0, and the
        # bumped epoch's sequences must follow.
        fenced = await submit(rm, part, batch(2, epoch=0))
        old_retry = await submit(rm, part, batch(0, epoch=0))
        bad_start = await submit(rm, part, batch(4, epoch=2))
        gap = await submit(rm, part, batch(5, epoch=1))
        codes = [a.result().error_code for a in (fenced, old_retry, bad_start, gap)]
        assert codes == [ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_EPOCH,
                         ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
        follows = await submit(rm, part, batch(2, epoch=1))
        bumped_retry = await submit(rm, part, batch(0, epoch=1))
        assert part.log.appends_in_flight == 3 and part.log.next_offset == 6
    results = [await asyncio.wait_for(a, 10) for a in (old, bumped, follows, bumped_retry)]
    assert [offsets(r) for r in results] == [(ErrorCode.NONE, 0, 1), (ErrorCode.NONE, 2, 3),
                                             (ErrorCode.NONE, 4, 5), (ErrorCode.NONE, 2, 3)]
    assert committed(part) == (1, 3, 2)  # the new epoch's batches only
    await rm.writer.close()


async def test_other_producers_and_plain_batches_interleave_with_one_in_flight(rm: ReplicaManager) -> None:
    part = leader(rm)
    with writer_held(rm):
        a1 = await submit(rm, part, batch(0, pid=PID))
        b1 = await submit(rm, part, batch(7, pid=PID + 1))  # unknown producer: any sequence
        plain = await submit(rm, part, memoryview(bytearray(build_batch([(int(time.time() * 1000), None, b"x", [])]))))
        a2 = await submit(rm, part, batch(2, pid=PID))
        b_gap = await submit(rm, part, batch(10, pid=PID + 1))
        b2 = await submit(rm, part, batch(9, pid=PID + 1))
        assert b_gap.result().error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    results = [await asyncio.wait_for(a, 10) for a in (a1, b1, plain, a2, b2)]
    assert [offsets(r) for r in results] == [(ErrorCode.NONE, 0, 1), (ErrorCode.NONE, 2, 3),
                                             (ErrorCode.NONE, 4, 4), (ErrorCode.NONE, 5, 6),
                                             (ErrorCode.NONE, 7, 8)]
    assert part.producers is not None and part.producers.states.producers[PID + 1].last_seq == 10
    await rm.writer.close()


async def test_a_completion_that_fails_after_the_write_fails_the_batches_checked_behind_it(
        rm: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not a failure the writer sees (it wrote both): the first one's completion raises on the loop.
    part = leader(rm)
    real = Log.append_done
    calls = []

    def append_done(self: Log, entry: PendingAppend) -> None:
        real(self, entry)
        calls.append(entry.last_offset)
        if len(calls) == 1:
            raise RuntimeError("a bug after the write")

    monkeypatch.setattr(Log, "append_done", append_done)
    with writer_held(rm):
        first = await submit(rm, part, batch(0))
        behind = await submit(rm, part, batch(2))
    results = [await asyncio.wait_for(a, 10) for a in (first, behind)]
    assert [r.error_code for r in results] == [ErrorCode.KAFKA_STORAGE_ERROR] * 2
    assert calls == [1, 3]  # both were taken by the log, neither answered as written
    assert committed(part) is None and part.high_watermark == 0
    assert rm.log_dir_offline and part.offline
    await rm.writer.close()
