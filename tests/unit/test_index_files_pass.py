"""ReplicaManager's background index-file pass (broker.log.index_files): it makes the files of the
segments registered as pending and nothing else, so a pass with none pending touches no
partition; an I/O error while making them takes the log directory offline like any other storage
error; out of descriptors, the segments are tried again at the next pass."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.segment import Segment
from broker.metrics import Registry
from broker.replication import replica_manager as replica_manager_module
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.zk.client import ZkClient
from protocol.errors import ErrorCode
from tests.support.replica_managers import records, standalone_replica_manager


@pytest.fixture
def rm(tmp_path: Path) -> ReplicaManager:
    return standalone_replica_manager(tmp_path)


def lead(rm: ReplicaManager, index: int, segment_bytes: int | None = None) -> Partition:
    return rm.become_leader("t", index, [1], 0, [1], 0, 1, 1, segment_bytes)


def has_files(seg: Segment) -> bool:
    return seg.index_path.exists() and seg.time_index_path.exists()


class NoWalk(dict[tuple[str, int], Partition]):
    """The partitions, refusing to be walked: what a pass with nothing pending must not do."""

    def values(self):  # type: ignore[no-untyped-def,override]
        raise AssertionError("the pass walked the partitions")

    def __iter__(self) -> Iterator[tuple[str, int]]:
        raise AssertionError("the pass walked the partitions")


async def test_a_pass_makes_the_pending_files_and_an_idle_pass_touches_no_partition(
        rm: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = [lead(rm, i) for i in range(3)]
    segments = [p.log.active_segment for p in parts]
    assert all(seg is not None and not seg.files_made and not has_files(seg) for seg in segments)
    assert len(rm.index_files) == 3
    await rm.make_pending_index_files()
    assert all(seg is not None and seg.files_made and has_files(seg) for seg in segments)
    assert len(rm.index_files) == 0

    # The loop itself, passes as fast as it can go, nothing pending: no partition is looked at.
    passes: list[int] = []
    real_pass = rm.make_pending_index_files

    async def counted() -> None:
        passes.append(len(rm.index_files))
        await real_pass()
    monkeypatch.setattr(rm, "make_pending_index_files", counted)
    monkeypatch.setattr(replica_manager_module, "_INDEX_FILES_EVERY_S", 0.001)
    hosted = rm.partitions
    rm.partitions = NoWalk(hosted)
    loop_task = asyncio.create_task(rm._index_files_loop())
    try:
        await asyncio.sleep(0.05)
        assert passes == []
        rm.partitions = hosted
        rolled = lead(rm, 3, segment_bytes=200)  # a new partition, and a roll's new segment after it
        for _ in range(10):
            assert rm.append(rolled, records(2), acks=1).error_code == ErrorCode.NONE
        assert len(rolled.log.segments) > 1
        active = rolled.log.active_segment
        assert active is not None and not active.files_made
        for _ in range(200):
            if active.files_made:
                break
            await asyncio.sleep(0.01)
        assert passes and has_files(active) and has_files(rolled.log.segments[0])
    finally:
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
    await rm.stop()


def failing_make_files(code: int) -> object:
    def make_files(self: Segment) -> None:
        raise OSError(code, "injected", str(self.index_path))
    return make_files


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
async def test_an_io_error_making_index_files_takes_the_log_dir_offline(rm: ReplicaManager, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         code: int) -> None:
    stopped: list[tuple[str, int]] = []
    rm.on_offline(stopped.append)
    a, b = lead(rm, 0), lead(rm, 1)
    monkeypatch.setattr(Segment, "make_files", failing_make_files(code))
    await rm.make_pending_index_files()
    assert rm.log_dir_offline and a.offline and b.offline
    assert sorted(stopped) == [("t", 0), ("t", 1)]
    assert await asyncio.wait_for(rm.dir_failures.next_failed(), 1) == tmp_path  # queued for the controller
    assert rm.append(a, records(1), acks=1).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert len(rm.index_files) == 0  # nothing left to retry: no more tries, no more log lines
    monkeypatch.undo()
    await rm.stop()
    assert not any(has_files(seg) for p in (a, b) for seg in p.log.segments)
    assert not list(tmp_path.glob("t-*/.clean_shutdown"))


async def test_out_of_descriptors_the_files_are_made_at_the_next_pass(rm: ReplicaManager,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """EMFILE is not a failed disk (broker.log.open_files; appends treat it the same way): the
    directory stays online, the event is logged, and the segments wait for the next pass."""
    parts = [lead(rm, i) for i in range(3)]
    monkeypatch.setattr(Segment, "make_files", failing_make_files(errno.EMFILE))
    await rm.make_pending_index_files()
    assert not rm.log_dir_offline and not any(p.offline for p in parts)
    assert rm.descriptor_errors == 1
    assert len(rm.index_files) == 3
    monkeypatch.undo()
    await rm.make_pending_index_files()
    assert all(has_files(seg) for p in parts for seg in p.log.segments)
    await rm.stop()


async def test_a_shutdown_creates_no_file_for_a_partition_never_written(rm: ReplicaManager, tmp_path: Path) -> None:
    """A new partition's first close (a SIGTERM right after creating 10,000 of them) creates
    neither index files nor a producer snapshot for a log that holds nothing; the next start
    creates none either. One written to with no index point gets none either (the close leaves
    them out: broker.log.segment), while its first append registers it for the background pass."""
    lead(rm, 0)  # never written
    written = lead(rm, 1)
    assert rm.append(written, records(2), acks=1).error_code == ErrorCode.NONE
    await rm.sync_epochs()  # the leader-epoch checkpoints, written before LeaderAndIsr is answered
    before = {p.name: sorted(f.name for f in p.iterdir()) for p in tmp_path.glob("t-*")}
    await rm.stop()
    after = {p.name: sorted(f.name for f in p.iterdir()) for p in tmp_path.glob("t-*")}
    assert after["t-0"] == before["t-0"]
    # No producer wrote to it: no snapshot either (PartitionProducers.close).
    # Nor index files: no index point, one time entry (the close's final one), all in the log.
    assert set(after["t-1"]) - set(before["t-1"]) == set()

    again = ReplicaManager(rm.config, ZkClient("127.0.0.1:1"), Registry(), clock=lambda: 0.0)
    await again.load_logs()
    part = lead(again, 0)
    assert part.log_end_offset == 0 and sorted(f.name for f in (tmp_path / "t-0").iterdir()) == before["t-0"]
    assert len(again.index_files) == 0  # none made at the start for a segment never written
    assert again.append(part, records(1), acks=1).error_code == ErrorCode.NONE
    assert len(again.index_files) == 1  # its first append: the background pass's to make
    await again.make_pending_index_files()
    await again.stop()
    assert {"00000000000000000000.index", "00000000000000000000.timeindex"} <= {
        f.name for f in (tmp_path / "t-0").iterdir()}
