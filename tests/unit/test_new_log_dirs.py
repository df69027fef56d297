"""New partitions' directories made ahead of their open, on worker threads (a LeaderAndIsr creating
thousands): the log opened over them is the one a plain open makes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.apis import leader_and_isr
from broker.config import BrokerConfig
from broker.log import Log
from broker.log.log import make_new_log_dir
from broker.metadata import MetadataCache
from broker.metrics import Registry
from broker.replication.replica_manager import ReplicaManager
from broker.replication.roles import PREPARE_FROM, PartitionRoles
from broker.zk.client import ZkClient
from broker.zk.topic_configs import TopicConfigs
from protocol.errors import ErrorCode
from tests.support.batches import stamped_batch as batch


def test_a_log_opened_over_a_made_directory_is_a_new_log(tmp_path: Path) -> None:
    assert make_new_log_dir(tmp_path / "t-0")
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == ["00000000000000000000.log"]
    made = Log.open(tmp_path / "t-0")
    plain = Log.open(tmp_path / "t-1")
    for plog in (made, plain):
        assert (plog.log_start_offset, plog.log_end_offset, plog.size_bytes) == (0, 0, 0)
        assert [s.base_offset for s in plog.segments] == [0]
        plog.append(batch(0, 2, 1), 1)
        plog.close()
        again = Log.open(plog.directory)
        assert again.log_end_offset == 2
        again.close()


def test_an_existing_directory_is_left_alone(tmp_path: Path) -> None:
    plog = Log.open(tmp_path / "t-0")
    plog.append(batch(0, 2, 1), 1)
    plog.close()
    before = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    assert not make_new_log_dir(tmp_path / "t-0")
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == before


async def test_the_replica_manager_makes_only_partitions_new_here(tmp_path: Path) -> None:
    rm = ReplicaManager(BrokerConfig(broker_id=1, log_dirs=[tmp_path]), ZkClient("127.0.0.1:1"), Registry())
    part = rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    rm.append(part, batch(0, 1, 0), acks=1)
    assert await rm.make_new_log_dirs([("t", 0), ("t", 1), ("u", 3), ("../x", 0)]) == [("t", 1), ("u", 3)]
    assert sorted(p.name for p in (tmp_path / "t-1").iterdir()) == ["00000000000000000000.log"]
    assert not (tmp_path.parent / "x-0").exists()
    led = rm.become_leader("t", 1, [1], 0, [1], 0, 1, 1, None)
    assert led.log_end_offset == 0 and part.log_end_offset == 1
    await rm.stop()


async def test_directories_no_state_opened_are_removed(tmp_path: Path) -> None:
    """Made ahead, then not opened (the LeaderAndIsr cut short): removed while they hold only the
    empty first segment; an opened one, or one holding anything else, is left."""
    rm = ReplicaManager(BrokerConfig(broker_id=1, log_dirs=[tmp_path]), ZkClient("127.0.0.1:1"), Registry())
    made = await rm.make_new_log_dirs([("t", 0), ("t", 1), ("t", 2)])
    assert made == [("t", 0), ("t", 1), ("t", 2)]
    rm.become_leader("t", 0, [1], 0, [1], 0, 1, 1, None)
    (tmp_path / "t-2" / "other").write_bytes(b"")
    assert rm.remove_unused_new_dirs(made) == 1
    assert not (tmp_path / "t-1").exists()
    assert (tmp_path / "t-0").is_dir() and (tmp_path / "t-2" / "other").exists()
    # A state for the removed one later opens it as it would have (a plain open makes the directory).
    assert rm.become_leader("t", 1, [1], 0, [1], 0, 1, 1, None).log_end_offset == 0
    await rm.stop()


class _Epochs:
    async def check(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        return ErrorCode.NONE


class _Fetchers:
    def add(self, part: object, leader: object) -> None: ...

    def remove(self, tp: tuple[str, int]) -> None: ...


def _leader_and_isr(roles: PartitionRoles) -> tuple[Any, dict[str, Any]]:
    ctx = SimpleNamespace(services=SimpleNamespace(controller=SimpleNamespace(epochs=_Epochs()), roles=roles,
                                                   broker_id=1),
                          conn=SimpleNamespace(peer="test"))
    states = [{"topic_name": "n", "partition_index": p, "controller_epoch": 1, "leader": 1, "leader_epoch": 0,
               "isr": [1], "zk_version": 0, "replicas": [1]} for p in range(PREPARE_FROM + 36)]
    return ctx, {"controller_epoch": 1, "broker_epoch": 0, "live_leaders": [], "ungrouped_partition_states": states}


@pytest.mark.parametrize("cut", ["cancelled", "failed"])
async def test_a_leader_and_isr_cut_short_leaves_no_empty_partition_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str) -> None:
    """A LeaderAndIsr of many new partitions makes their directories first (prepare); a shutdown
    cancelling it, or a state failing, after 40 states: the 40 opened logs stay, and no directory
    is left for the states never applied."""
    rm = ReplicaManager(BrokerConfig(broker_id=1, log_dirs=[tmp_path]), ZkClient("127.0.0.1:1"), Registry())
    configs = TopicConfigs(ZkClient("127.0.0.1:1"))
    configs.set("n", {})  # known: no ZooKeeper read (there is none behind this client)
    roles = PartitionRoles(rm.config, rm, _Fetchers(), MetadataCache(), configs)  # type: ignore[arg-type]
    monkeypatch.setattr(leader_and_isr.authorization, "error", lambda ctx: ErrorCode.NONE)
    real_apply = roles.apply_partition_state
    stuck = asyncio.Event()

    async def apply(ps: dict[str, Any], leaders: dict[int, tuple[str, int]], batch: Any = None) -> ErrorCode:  # noqa: ANN401
        if ps["partition_index"] == 40:
            if cut == "failed":
                raise RuntimeError("a state's failure")
            stuck.set()
            await asyncio.Event().wait()  # until cancelled
        return await real_apply(ps, leaders, batch)

    monkeypatch.setattr(roles, "apply_partition_state", apply)
    ctx, request = _leader_and_isr(roles)
    task = asyncio.ensure_future(leader_and_isr.handle(ctx, request))
    if cut == "cancelled":
        await stuck.wait()
        assert len([d for d in tmp_path.iterdir() if d.name.startswith("n-")]) == len(request["ungrouped_partition_states"])
        task.cancel()
    with pytest.raises(asyncio.CancelledError if cut == "cancelled" else RuntimeError):
        await task
    assert sorted(d.name for d in tmp_path.iterdir() if d.name.startswith("n-")) == sorted(f"n-{p}" for p in range(40))
    assert all(rm.get("n", p) is not None for p in range(40))
    await rm.stop()
