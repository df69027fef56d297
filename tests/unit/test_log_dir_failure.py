"""The replica manager when its log directory fails (Kafka's handleLogDirFailure): partitions go
offline at once, KAFKA_STORAGE_ERROR is answered, fetchers are told, the failure is queued once
for the controller, and no checkpoint is written to the failed directory."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest

from broker.log import KafkaStorageError
from broker.log import segment as segment_module
from broker.metadata import MetadataCache
from broker.replication.log_dir_failure import LogDirFailureChannel, event_body
from broker.replication.replica_manager import CHECKPOINT, ReplicaManager
from broker.replication.roles import PartitionRoles
from broker.zk.client import ZkClient
from broker.zk.topic_configs import TopicConfigs
from protocol.errors import ErrorCode
from tests.support.replica_managers import records, standalone_replica_manager


@pytest.fixture
def rm(tmp_path: Path) -> ReplicaManager:
    return standalone_replica_manager(tmp_path)


def enospc(monkeypatch: pytest.MonkeyPatch) -> None:
    def write(fd: int, data: bytes | memoryview) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(segment_module, "_write_all", write)


def test_failed_append_answers_storage_error_and_takes_the_dir_offline(rm: ReplicaManager,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[tuple[str, int]] = []
    rm.on_offline(stopped.append)
    a = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    b = rm.become_leader("t", 1, [1], 0, [1], 0, 1, 1, None)
    assert rm.append(a, records(3), acks=1).error_code == ErrorCode.NONE
    enospc(monkeypatch)
    result = rm.append(a, records(2), acks=-1)
    code, base = result.error_code, result.base_offset
    assert (code, base) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
    assert a.log_end_offset == 3  # nothing of the failed append
    # The whole directory: the other partition too, and every later request.
    assert rm.log_dir_offline and a.offline and b.offline
    assert rm.is_offline("t", 0) and rm.is_offline("t", 1)
    assert sorted(stopped) == [("t", 0), ("t", 1)]
    monkeypatch.undo()
    assert rm.append(b, records(1), acks=1).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    # A partition the controller hands over now cannot be opened either, and is offline too.
    with pytest.raises(KafkaStorageError):
        rm.become_leader("u", 0, [1], 0, [1], 0, 1, 1, None)
    assert rm.is_offline("u", 0) and not rm.is_offline("v", 0)


async def test_waiting_acks_all_produce_answers_storage_error(rm: ReplicaManager) -> None:
    part = rm.become_leader("t", 0, [1, 2], 0, [1, 2], 0, 1, 1, None)
    assert rm.append(part, records(1), acks=-1).error_code == ErrorCode.NONE
    rm.fail_dir("flush", OSError(errno.EIO, "Input/output error"))
    assert await rm.wait_for_hw(part, 1, 5) == ErrorCode.KAFKA_STORAGE_ERROR


def test_checkpoint_failure_fails_the_dir_and_nothing_more_is_written(rm: ReplicaManager, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    rm._try_checkpoint()
    assert (tmp_path / CHECKPOINT).exists()

    def eperm(self: Path, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(Path, "write_text", eperm)
    rm._try_checkpoint()
    assert rm.log_dir_offline and part.offline
    monkeypatch.undo()
    (tmp_path / CHECKPOINT).unlink()
    rm._try_checkpoint()
    assert not (tmp_path / CHECKPOINT).exists()


async def test_roles_answer_storage_error_for_a_partition_in_a_failed_dir(rm: ReplicaManager) -> None:
    class Fetchers:
        def __init__(self) -> None:
            self.removed: list[tuple[str, int]] = []

        def add(self, *args: Any) -> None:
            raise AssertionError("no fetcher for an offline partition")

        def remove(self, tp: tuple[str, int]) -> None:
            self.removed.append(tp)

    fetchers = Fetchers()
    configs = TopicConfigs(ZkClient("127.0.0.1:1"))
    configs.set("t", {})  # known: nothing asks ZooKeeper
    roles = PartitionRoles(rm.config, rm, fetchers, MetadataCache(), configs)  # type: ignore[arg-type]
    rm.fail_dir("checkpoint", OSError(errno.EROFS, "Read-only file system"))
    ps = {"topic_name": "t", "partition_index": 0, "controller_epoch": 1, "leader": 2, "leader_epoch": 0,
          "isr": [1, 2], "zk_version": 0, "replicas": [1, 2]}
    assert await roles.apply_partition_state(ps, {2: ("127.0.0.1", 9)}) == ErrorCode.KAFKA_STORAGE_ERROR
    assert fetchers.removed == [("t", 0)]


async def test_channel_reports_each_failed_dir_once_until_reminded(tmp_path: Path) -> None:
    ch = LogDirFailureChannel()
    assert ch.fail(tmp_path, "append", OSError(errno.ENOSPC, "full"))
    assert not ch.fail(tmp_path, "read", OSError(errno.EIO, "eio"))
    ch.remind(tmp_path)  # already queued: not twice
    assert await ch.next_failed() == tmp_path
    assert ch._queue.empty()
    ch.remind(tmp_path)
    assert await ch.next_failed() == tmp_path
    ch.remind(tmp_path / "other")  # never failed: nothing to report
    assert ch._queue.empty()
    assert json.loads(event_body(3)) == {"version": 1, "broker": 3, "event": 1}


async def test_stop_leaves_no_clean_shutdown_marker_in_a_failed_dir(rm: ReplicaManager, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    a = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    rm.become_leader("t", 1, [1], 0, [1], 0, 1, 1, None)
    enospc(monkeypatch)
    assert rm.append(a, records(1), acks=1).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.undo()
    await rm.stop()
    # Both logs get a full recovery at the next start, the one that did not fail too.
    assert not list(tmp_path.glob("t-*/.clean_shutdown"))
    assert not (tmp_path / CHECKPOINT).exists()
