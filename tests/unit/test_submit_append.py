"""ReplicaManager.submit_append: leader Produce appends through the log directory's writer thread."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from broker.replication import replica_manager
from broker.replication.replica_manager import ReplicaManager
from protocol.errors import ErrorCode
from protocol.records.record_batch import build_batch
from tests.support.replica_managers import records, standalone_replica_manager


@pytest.fixture
def rm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReplicaManager:
    # Every append through the writer thread (small ones are otherwise written inline).
    monkeypatch.setattr(replica_manager, "INLINE_APPEND_BYTES", 0)
    return standalone_replica_manager(tmp_path / "logs")


@pytest.fixture
def inline_rm(tmp_path: Path) -> ReplicaManager:
    return standalone_replica_manager(tmp_path / "inline-logs")


def idempotent(seq: int, count: int = 2, pid: int = 1000) -> memoryview:
    now = int(time.time() * 1000)
    batch = build_batch([(now, None, b"v%d" % i, []) for i in range(count)], producer_id=pid, producer_epoch=0,
                        base_sequence=seq)
    return memoryview(bytearray(batch))


async def test_an_append_is_seen_and_answered_only_once_written(rm: ReplicaManager) -> None:
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    answers = [await rm.submit_append(part, memoryview(bytearray(records(3))), acks=1) for _ in range(5)]
    assert part.log.next_offset == 15
    assert part.log_end_offset <= 15
    results = [await a for a in answers]
    assert [(r.error_code, r.base_offset, r.last_offset) for r in results] == \
        [(ErrorCode.NONE, 3 * i, 3 * i + 2) for i in range(5)]
    assert part.log_end_offset == 15 and part.high_watermark == 15
    await rm.writer.close()


async def test_idempotent_batches_in_flight_keep_kafkas_answers(rm: ReplicaManager) -> None:
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    first = await rm.submit_append(part, idempotent(0), acks=1)
    # Submitted while the first is in flight: each checked against the ones before it
    # (tests/unit/test_idempotent_in_flight.py holds them in flight for certain).
    second = asyncio.ensure_future(rm.submit_append(part, idempotent(2), acks=1))
    duplicate = asyncio.ensure_future(rm.submit_append(part, idempotent(0), acks=1))
    gap = asyncio.ensure_future(rm.submit_append(part, idempotent(9), acks=1))
    r1 = await first
    r2 = await (await second)
    r_dup = await (await duplicate)
    r_gap = await (await gap)
    assert (r1.error_code, r1.base_offset) == (ErrorCode.NONE, 0)
    assert (r2.error_code, r2.base_offset) == (ErrorCode.NONE, 2)
    assert (r_dup.error_code, r_dup.base_offset, r_dup.last_offset) == (ErrorCode.NONE, 0, 1)
    assert r_gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert part.log_end_offset == 4
    await rm.writer.close()


async def test_role_changes_and_the_synchronous_append_settle_first(rm: ReplicaManager) -> None:
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    answer = await rm.submit_append(part, memoryview(bytearray(records(2))), acks=1)
    assert rm.append(part, records(1), acks=1).base_offset == 2  # after the one in flight
    assert answer.done() and answer.result().base_offset == 0
    again = await rm.submit_append(part, memoryview(bytearray(records(2))), acks=1)
    rm.become_follower("t", 0, [1, 2], 2, 1, [1, 2], 0, 1, None)
    assert again.done() and again.result().error_code == ErrorCode.NONE
    assert part.log.appends_in_flight == 0 and part.log_end_offset == 5
    await rm.writer.close()


async def test_after_stop_appends_are_refused_and_no_thread_starts(rm: ReplicaManager) -> None:
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    queued = [await rm.submit_append(part, memoryview(bytearray(records(50))), acks=1) for _ in range(20)]
    await rm.stop()
    assert all(q.done() and q.result().error_code == ErrorCode.NONE for q in queued)
    thread = rm.writer._thread
    late = await rm.submit_append(part, memoryview(bytearray(records(1))), acks=1)
    assert late.done() and late.result().error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert rm.writer._thread is thread and (thread is None or not thread.is_alive())


async def test_a_failed_write_answers_storage_error_and_takes_the_dir_offline(rm: ReplicaManager) -> None:
    import resource
    import signal
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    now = int(time.time() * 1000)

    def big() -> memoryview:
        return memoryview(bytearray(build_batch([(now, None, b"x" * 1_000_000, [])])))

    limit = 4 << 20  # regular files may not grow past 4 MiB: the fifth write fails part way (EFBIG)
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        answers = [await rm.submit_append(part, big(), acks=1) for _ in range(6)]
        results = [await a for a in answers]
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert [r.error_code for r in results] == [ErrorCode.NONE] * 4 + [ErrorCode.KAFKA_STORAGE_ERROR] * 2
    assert rm.log_dir_offline and part.offline
    assert part.log_end_offset == 4 and part.log.next_offset == 4
    assert part.log.segments[-1].log_path.stat().st_size == part.log.segments[-1].size  # cut back
    late = await rm.submit_append(part, memoryview(bytearray(records(1))), acks=1)
    assert (await late).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    await rm.writer.close()


async def test_a_small_append_with_nothing_in_flight_is_written_inline(inline_rm: ReplicaManager) -> None:
    rm = inline_rm
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    answer = await rm.submit_append(part, memoryview(bytearray(records(3))), acks=1)
    # Answered at once, the log end offset moved, and no thread was ever started for it.
    assert answer.done() and (answer.result().error_code, answer.result().base_offset) == (ErrorCode.NONE, 0)
    assert part.log_end_offset == 3 and part.log.appends_in_flight == 0
    assert rm.writer._thread is None
    await rm.writer.close()


async def test_a_small_append_behind_one_in_flight_follows_it_through_the_thread(inline_rm: ReplicaManager) -> None:
    rm = inline_rm
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    now = int(time.time() * 1000)
    large = memoryview(bytearray(build_batch([(now, None, b"x" * replica_manager.INLINE_APPEND_BYTES, [])])))
    first = await rm.submit_append(part, large, acks=1)
    assert part.log.appends_in_flight == 1  # large: queued to the thread
    small = await rm.submit_append(part, memoryview(bytearray(records(1))), acks=1)
    assert part.log.appends_in_flight == 2 or small.done()  # queued behind it, never written before it
    r1, r2 = await first, await small
    assert (r1.base_offset, r2.base_offset) == (0, 1)
    assert part.log_end_offset == 2 and part.log.appends_in_flight == 0
    # Nothing in flight again: the next small one is inline.
    third = await rm.submit_append(part, memoryview(bytearray(records(1))), acks=1)
    assert third.done() and third.result().base_offset == 2
    await rm.writer.close()


async def test_a_failed_directory_refuses_a_small_append_too(inline_rm: ReplicaManager) -> None:
    rm = inline_rm
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    rm.writer._failed = OSError(5, "EIO")  # a write of another log of the directory failed
    answer = await rm.submit_append(part, memoryview(bytearray(records(1))), acks=1)
    assert answer.done() and answer.result().error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert part.log_end_offset == 0
    await rm.writer.close()


async def test_a_completion_that_raises_answers_storage_error(rm: ReplicaManager,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)

    def broken(*args: object) -> None:
        raise RuntimeError("a bug after the write")

    monkeypatch.setattr(rm, "_append_written", broken)
    answer = await rm.submit_append(part, memoryview(bytearray(records(1))), acks=1)
    result = await asyncio.wait_for(answer, 5)  # answered, not left hanging
    assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    await rm.writer.close()


async def test_a_partition_no_longer_led_here_is_refused_before_anything(inline_rm: ReplicaManager) -> None:
    rm = inline_rm
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    rm.become_follower("t", 0, [1, 2], 2, 1, [1, 2], 0, 1, None)
    answer = await rm.submit_append(part, memoryview(bytearray(records(1))), acks=1)
    assert answer.done() and answer.result().error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert part.log_end_offset == 0
    await rm.writer.close()
