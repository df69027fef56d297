"""New partitions' directories made ahead of their open, on worker threads (a LeaderAndIsr creating
thousands): the log opened over them is the one a plain open makes."""

from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from broker.log import Log
from broker.log.log import make_new_log_dir
from broker.metrics import Registry
from broker.replication.replica_manager import ReplicaManager
from broker.zk.client import ZkClient
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
    assert await rm.make_new_log_dirs([("t", 0), ("t", 1), ("u", 3), ("../x", 0)]) == 2
    assert sorted(p.name for p in (tmp_path / "t-1").iterdir()) == ["00000000000000000000.log"]
    assert not (tmp_path.parent / "x-0").exists()
    led = rm.become_leader("t", 1, [1], 0, [1], 0, 1, 1, None)
    assert led.log_end_offset == 0 and part.log_end_offset == 1
    await rm.stop()
