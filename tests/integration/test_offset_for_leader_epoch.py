"""OffsetForLeaderEpoch 0-4 on three real brokers: the leader's answers, fencing, errors, a leader change.

Every version goes over a real socket through the project's codec (v4 flexible). A new
leader records (its epoch, its log end offset), so after the first leader dies the new one
answers epoch 0 with where epoch 1 began, and fences requests that carry the old epoch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.cluster import Cluster
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration

VERSIONS = range(0, 5)


async def ask(cluster: Cluster, broker: int, version: int, topic: str, epoch: int,
              current: int = -1, partition: int = 0) -> dict:
    body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}]}]}
    async with await connect(cluster.by_id(broker).bootstrap) as conn:
        resp = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body)
    assert resp["topics"][0]["topic"] == topic
    return resp["topics"][0]["partitions"][0]


async def test_leader_answers_fences_and_refuses_as_kafka(cluster: Cluster) -> None:
    await cluster.create_topic("e", assignment={0: [0, 1, 2]})
    st = await cluster.state("e", 0)
    leader, epoch = st["leader"], st["leader_epoch"]
    follower = next(b for b in (0, 1, 2) if b != leader)
    async with await connect(cluster.by_id(leader).bootstrap) as conn:
        for i in range(3):
            assert (await produce(conn, "e", 0, [(None, b"m%d-%d" % (i, j)) for j in range(5)], acks=-1))["error_code"] == 0
    for v in VERSIONS:
        got = await ask(cluster, leader, v, "e", epoch)
        assert got["error_code"] == 0 and got["end_offset"] == 15, (v, got)
        if v >= 1:
            assert got["leader_epoch"] == epoch
        # An epoch above every known one: UNDEFINED, no error (Kafka's endOffsetFor).
        assert (await ask(cluster, leader, v, "e", epoch + 7))["end_offset"] == -1
        assert (await ask(cluster, follower, v, "e", epoch))["error_code"] == ErrorCode.NOT_LEADER_FOR_PARTITION
        assert (await ask(cluster, leader, v, "nope", 0))["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert (await ask(cluster, leader, v, "e", 0, partition=9))["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for v in range(2, 5):  # current_leader_epoch exists from v2
        assert (await ask(cluster, leader, v, "e", epoch, current=epoch + 1))["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert (await ask(cluster, leader, v, "e", epoch, current=epoch))["end_offset"] == 15

    # A leader change: the new leader's epoch starts at its log end, 15.
    cluster.by_id(leader).kill()
    st = await cluster.wait_for("a new leader", lambda: _new_leader(cluster, leader))
    new_leader, new_epoch = st["leader"], st["leader_epoch"]
    assert new_epoch > epoch

    async def answers() -> dict | None:
        got = await ask(cluster, new_leader, 4, "e", epoch)
        return got if got["error_code"] == 0 else None
    got = await cluster.wait_for("the new leader to answer", answers)
    assert (got["leader_epoch"], got["end_offset"]) == (epoch, 15)
    async with await connect(cluster.by_id(new_leader).bootstrap) as conn:
        assert (await produce(conn, "e", 0, [(None, b"after")], acks=1))["error_code"] == 0
    got = await ask(cluster, new_leader, 3, "e", new_epoch, current=new_epoch)
    assert (got["leader_epoch"], got["end_offset"]) == (new_epoch, 16)
    fenced = await ask(cluster, new_leader, 2, "e", epoch, current=epoch)
    assert fenced["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    # The new leader's epoch reaches the file by the deferred-sync threads, after the LeaderAndIsr answer.
    path = cluster.by_id(new_leader).log_dir / "e-0" / "leader-epoch-checkpoint"
    epochs = await wait_for("the new epoch on disk", lambda: path.exists() and (
        lines := path.read_text().splitlines())[-1] == f"{new_epoch} 15" and lines)
    assert epochs[0] == "0"


async def _new_leader(cluster: Cluster, old: int) -> dict | None:
    st = await cluster.state("e", 0)
    return st if st["leader"] not in (old, -1) else None


async def test_a_corrupt_or_missing_checkpoint_is_rebuilt_from_the_log(broker_factory) -> None:  # noqa: ANN001
    """The epochs are in the batches: a broker restarted over a damaged `leader-epoch-checkpoint`
    (or none) rebuilds it from the log, says so, and answers OffsetForLeaderEpoch as before."""
    b = broker_factory(0)
    await create_topic(b, "c", 1)
    async with await connect(b) as conn:
        for i in range(4):
            assert (await produce(conn, "c", 0, [(None, b"v%d" % i)], acks=1))["error_code"] == 0
    path = b.log_dir / "c-0" / "leader-epoch-checkpoint"
    # A new leader's epoch is written by the deferred-sync threads after the LeaderAndIsr answer.
    await wait_for("the checkpoint on disk", lambda: path.exists() and path.read_text() == "0\n1\n0 0\n")
    for damage in ("0\n3\n0 0\n", None):
        assert b.stop() == 0
        if damage is None:
            path.unlink()
        else:
            path.write_text(damage)
        b.start()
        async def answers() -> dict | None:  # noqa: B023 - read at once, inside the loop's iteration
            async with await connect(b) as conn:
                resp = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
                    {"topic": "c", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
            got = resp["topics"][0]["partitions"][0]
            return got if got["error_code"] == 0 else None
        got = await wait_for("the restarted leader to answer", answers)
        assert (got["leader_epoch"], got["end_offset"]) == (0, 4)
        assert "leader_epochs.rebuilt" in b.log()
        # The rebuilt file is written with the new leader's epoch by the deferred-sync threads,
        # after the LeaderAndIsr answer: the broker may answer from memory before it lands (a
        # crash before then rebuilds again from the same batches).
        await wait_for("the rebuilt checkpoint on disk", lambda d=damage: _rebuilt(path, d))
    assert "leader_epochs.corrupt_checkpoint" in b.log_path.read_text()


def _rebuilt(path: Path, damage: str | None) -> bool:
    """The checkpoint rewritten from the batches: not the damaged text, epoch 0 from offset 0
    (a later epoch the restart may add is allowed)."""
    if not path.exists():
        return False
    text = path.read_text()
    lines = text.splitlines()
    return text != damage and lines[:1] == ["0"] and lines[1:2] == [str(len(lines) - 2)] and lines[2:3] == ["0 0"]
