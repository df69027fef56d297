"""The background index-file pass (broker.log.index_files) racing the event loop: a partition
deleted, a log truncated fully, or the broker stopped while a worker thread is making index
files leaves no file behind it, recreates no directory and fails no log directory; a segment
written before a kill -9 without its index files is recovered at the next start."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from broker.log.segment import Segment
from broker.metrics import Registry
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.zk.client import ZkClient
from protocol.errors import ErrorCode
from tests.support.replica_managers import records, standalone_replica_manager


@pytest.fixture
def rm(tmp_path: Path) -> ReplicaManager:
    return standalone_replica_manager(tmp_path)


def lead(rm: ReplicaManager, index: int) -> Partition:
    return rm.become_leader("t", index, [1], 0, [1], 0, 1, 1, None)


def blocking_make_files(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Segment.make_files that, for the first segment, waits (on its worker thread) until released."""
    entered, release = threading.Event(), threading.Event()
    real = Segment.make_files
    first = [True]

    def make_files(self: Segment) -> None:
        if first[0]:
            first[0] = False
            entered.set()
            assert release.wait(10)
        real(self)

    monkeypatch.setattr(Segment, "make_files", make_files)
    return entered, release


async def test_a_partition_deleted_during_a_pass_gets_no_file_and_no_directory(
        rm: ReplicaManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, doomed = lead(rm, 0), lead(rm, 1)
    entered, release = blocking_make_files(monkeypatch)
    task = asyncio.create_task(rm.make_pending_index_files())
    assert await asyncio.to_thread(entered.wait, 10)
    rm.stop_replica("t", 1, delete=True)  # t-1's segment is in the chunk the thread holds
    assert not (tmp_path / "t-1").exists()
    release.set()
    await task
    assert not (tmp_path / "t-1").exists()
    assert not rm.log_dir_offline and not first.offline
    seg = first.log.active_segment
    assert seg is not None and seg.index_path.exists() and seg.time_index_path.exists()
    assert doomed.log.active_segment is not None and doomed.log.active_segment.closed
    await rm.stop()
    assert not (tmp_path / "t-1").exists()


async def test_a_log_truncated_fully_during_a_pass_keeps_its_new_segment_pending(
        rm: ReplicaManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = lead(rm, 0)
    assert rm.append(part, records(3), acks=1).error_code == ErrorCode.NONE
    old = part.log.active_segment
    entered, release = blocking_make_files(monkeypatch)
    task = asyncio.create_task(rm.make_pending_index_files())
    assert await asyncio.to_thread(entered.wait, 10)
    part.log.truncate_fully_and_start_at(0)  # same base, same file names: a new segment
    new = part.log.active_segment
    assert new is not None and new is not old and old is not None and old.closed
    release.set()
    await task
    assert not rm.log_dir_offline
    # The old segment's files went with it (none made after its close) and the new one waits
    # for the next pass.
    assert not new.index_path.exists() and not new.files_made
    assert len(rm.index_files) == 1
    monkeypatch.undo()
    await rm.make_pending_index_files()
    assert new.index_path.exists() and new.time_index_path.exists()
    await rm.stop()


async def test_a_stop_during_a_pass_closes_cleanly(rm: ReplicaManager, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    parts = [lead(rm, i) for i in range(3)]
    assert rm.append(parts[2], records(2), acks=1).error_code == ErrorCode.NONE
    entered, release = blocking_make_files(monkeypatch)
    task = asyncio.create_task(rm.make_pending_index_files())
    assert await asyncio.to_thread(entered.wait, 10)
    stopping = asyncio.create_task(rm.stop())
    await asyncio.sleep(0.2)
    release.set()
    await stopping
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rm.stop_errors == 0 and not rm.log_dir_offline
    again = ReplicaManager(rm.config, ZkClient("127.0.0.1:1"), Registry(), clock=lambda: 0.0)
    await again.load_logs()
    assert [lead(again, i).log_end_offset for i in range(3)] == [0, 0, 2]
    await again.stop()


async def test_a_kill_after_appends_without_index_files_is_recovered(rm: ReplicaManager, tmp_path: Path) -> None:
    """kill -9 before the pass: a written segment without index files, no marker. The next start
    recovers it (its log end from the log itself) and cuts a torn tail."""
    empty, written = lead(rm, 0), lead(rm, 1)
    assert rm.append(written, records(5), acks=1).error_code == ErrorCode.NONE
    seg = written.log.active_segment
    assert seg is not None and not seg.index_path.exists()
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 7)  # a torn tail
    for p in (empty, written):
        p.log.abandon()  # the descriptors go; nothing is written (a kill)
    again = ReplicaManager(rm.config, ZkClient("127.0.0.1:1"), Registry(), clock=lambda: 0.0)
    await again.load_logs()
    a, b = lead(again, 0), lead(again, 1)
    assert (a.log_end_offset, b.log_end_offset) == (0, 5)
    assert os.path.getsize(seg.log_path) == b.log.size_bytes
    assert again.append(b, records(1), acks=1).error_code == ErrorCode.NONE
    assert b.log_end_offset == 6
    await again.stop()
