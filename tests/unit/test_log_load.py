"""The replica manager's start-up load and clean shutdown (issue 21): every partition directory
opened on worker threads before LeaderAndIsr claims it, one clean-shutdown marker for the log dir
(Kafka's `.kafka_cleanshutdown`), consumed at start-up so that a crash after it recovers."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.log import segment as segment_module
from broker.log.leader_epoch_checkpoint import FILENAME, DeferredSyncs, Job
from broker.metrics import Registry
from broker.replication.replica_manager import LOG_DIR_CLEAN_SHUTDOWN, ReplicaManager
from broker.zk.client import ZkClient
from protocol.errors import ErrorCode
from protocol.records.message_set import build_message_set


def records(n: int) -> bytes:
    return build_message_set([(None, b"v%d" % i, 0) for i in range(n)])


def manager(log_dir: Path) -> ReplicaManager:
    config = BrokerConfig(broker_id=1, log_dirs=[log_dir], replica_lag_time_max_ms=10_000)
    return ReplicaManager(config, ZkClient("127.0.0.1:1"), Registry(), clock=lambda: 0.0)


def lead(rm: ReplicaManager, index: int) -> None:
    part = rm.become_leader("t", index, [1], 0, [1], 0, 1, 1, None)
    assert rm.append(part, records(3), acks=1).error_code == ErrorCode.NONE


async def test_clean_shutdown_leaves_one_marker_and_the_next_start_consumes_it(tmp_path: Path) -> None:
    rm = manager(tmp_path)
    for i in range(3):
        lead(rm, i)
    await rm.stop()
    assert (tmp_path / LOG_DIR_CLEAN_SHUTDOWN).exists()
    assert not list(tmp_path.glob("t-*/.clean_shutdown"))  # none per partition

    again = manager(tmp_path)
    assert not (tmp_path / LOG_DIR_CLEAN_SHUTDOWN).exists()  # gone before any log opens
    await again.load_logs()
    assert again.partitions == {}  # loaded, but no role until LeaderAndIsr
    part = again.become_leader("t", 1, [1], 1, [1], 0, 1, 1, None)
    assert part.log.opened_clean and part.log_end_offset == 3
    assert part.high_watermark == 3  # from the checkpoint the shutdown wrote
    await again.stop()


async def test_a_crash_after_a_clean_start_recovers_a_torn_tail(tmp_path: Path) -> None:
    rm = manager(tmp_path)
    lead(rm, 0)
    await rm.stop()
    again = manager(tmp_path)  # consumes the marker
    await again.load_logs()
    part = again.become_leader("t", 0, [1], 1, [1], 0, 1, 1, None)
    assert again.append(part, records(2), acks=1).error_code == ErrorCode.NONE
    segment = part.log.segments[-1].log_path
    whole = segment.stat().st_size
    with open(segment, "ab") as f:  # a kill -9 in the middle of a write
        f.write((99).to_bytes(8, "big") + (400).to_bytes(4, "big") + b"\x00" * 20)
    again.partitions.clear()  # crashed: nothing closed, no marker written

    third = manager(tmp_path)
    await third.load_logs()
    part = third.become_leader("t", 0, [1], 2, [1], 0, 1, 1, None)
    assert not part.log.opened_clean
    assert part.log_end_offset == 5 and segment.stat().st_size == whole
    await third.stop()


async def test_a_log_that_failed_to_load_keeps_the_dir_marker_away(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rm = manager(tmp_path)
    lead(rm, 0)
    lead(rm, 1)
    await rm.stop()
    again = manager(tmp_path)
    real_init = segment_module.Segment.__init__

    def failing_init(self: segment_module.Segment, directory: Path, *args: object, **kw: object) -> None:
        if directory.name == "t-1":
            raise OSError(5, "Input/output error")
        real_init(self, directory, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(segment_module.Segment, "__init__", failing_init)
    await again.load_logs()
    monkeypatch.undo()
    again.become_leader("t", 0, [1], 1, [1], 0, 1, 1, None)
    await again.stop()
    # t-1 was never opened: its state is unknown, so the log dir is not marked clean as a whole.
    assert not (tmp_path / LOG_DIR_CLEAN_SHUTDOWN).exists()
    assert (tmp_path / "t-0" / ".clean_shutdown").exists()
    assert not (tmp_path / "t-1" / ".clean_shutdown").exists()


async def test_stop_waits_for_an_epoch_round_whose_caller_was_cancelled(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A LeaderAndIsr cancelled by the shutdown while its round writes a new leader's epoch: the
    round finishes (shielded), and the shutdown waits for it before the logs close cleanly, so
    the clean open that follows (which recovers nothing) finds the epoch in the file."""
    rm = manager(tmp_path)
    lead(rm, 0)
    await rm.sync_epochs()  # the file exists: a new epoch is now written by a round's thread
    gate = threading.Event()
    real = DeferredSyncs.run

    def held(jobs: list[Job], threads: int = 16) -> list[tuple[Path, OSError]]:
        gate.wait(10)
        return real(jobs, threads)

    monkeypatch.setattr(DeferredSyncs, "run", staticmethod(held))
    rm.become_leader("t", 0, [1], 5, [1], 0, 1, 1, None)
    caller = asyncio.get_running_loop().create_task(rm.sync_epochs())
    await asyncio.sleep(0.05)
    caller.cancel()
    stopping = asyncio.get_running_loop().create_task(rm.stop())
    await asyncio.sleep(0.3)
    assert not stopping.done()  # waiting for the round, not closing logs under it
    gate.set()
    await stopping
    assert (tmp_path / "t-0" / FILENAME).read_text().splitlines()[-1] == "5 3"
