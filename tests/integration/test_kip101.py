"""KIP-101's two failures on three real brokers: an acknowledged message survives them now.

The sequence (L leads, X and C follow, C is the controller; replicas [L, X, C], ISR all three):

1. Ten single-message batches are produced to L with acks=all; each is acknowledged once X
   and C have fetched it. A follower learns the high watermark only from its next fetch
   response, which L parks for replica.fetch.wait.max.ms (8 s) as nothing new arrives: X and
   C hold the last message m (offset 9) with a high watermark of 9 that does not cover it.
2. L is killed (kill -9) and X is frozen (SIGSTOP): X's ZooKeeper session (10 s) outlives L's
   (4 s), so the controller first elects X, in the ISR and still registered, and C becomes its
   follower. X answers nothing, so C cannot fetch from it.
3. X's session expires; the controller elects C, the last live member of the ISR.

With high-watermark truncation (Kafka 0.10.1, and this project before leader epochs) C cut its
log to its high watermark, 9, when it became X's follower in step 2, and could not fetch m
back from the frozen X: C leads without m, and L and X, when they return, truncate to C's log.
The acknowledged m is gone. `test_high_watermark_truncation_loses_the_message` runs the
project's last release before leader epochs (commit PRE_EPOCHS, from `git archive`) and shows it.

With leader epochs C truncates only by the leader's answer to OffsetForLeaderEpoch; X never
answers, so C keeps m, leads with it, and L and X, restarted (asking C for the end of their
epoch 0), keep everything C has: every acknowledged message is read back, and the three
replicas hold the same bytes.

Why a freeze and not KIP-101's restart: KIP-101 tells the story with the follower restarting
(truncating to a stale high watermark on the way up). The controller here, as Kafka's, takes a
dead broker out of the ISR, and a restarted follower rejoins it only once it has fetched up to
the leader's high watermark, so a restart alone cannot make it an ISR member without m. The
same high-watermark cut also happens on the other road into the follower role, a LeaderAndIsr
naming a new leader, and that is the one this script takes; restarts are exercised after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.zk.client import ZkClient
from protocol.errors import ErrorCode
from protocol.records.records import decode_records
from tests.support.brokers import BrokerProcess, start_together
from tests.support.cluster import Cluster, wait_identical_replicas
from tests.support.releases import PRE_EPOCHS, source_tree
from tests.support.replication import partition_bytes
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration

TOPIC = "kip101"
N = 10

COMMON = {
    "replica.fetch.wait.max.ms": "8000",  # the followers' high watermark lags for 8 s
    "replica.lag.time.max.ms": "60000",  # no ISR shrink in the meantime
    "zookeeper.session.timeout.ms": "4000",
}
FROZEN_SESSION_MS = "10000"  # X: outlives L's session, so X is elected before it is noticed gone


async def _scenario(tmp_path: Path, zk_connect: str, source: Path | None) -> tuple[Cluster, dict[str, int], list[bytes]]:
    """Steps 1-3 of the module docstring; (cluster, roles, acknowledged values). C leads at the end."""
    brokers = [BrokerProcess(tmp_path, i, zk_connect, COMMON, source=source) for i in range(3)]
    start_together(brokers)
    zk = ZkClient(zk_connect, 6000)
    await zk.start()
    cluster = Cluster(brokers, zk)
    await cluster.wait_for("a controller", lambda: zk.exists("/controller"))
    c = await cluster.controller()
    leader, frozen = [b for b in (0, 1, 2) if b != c]
    # X's session must outlive L's: restart X with the longer one before the topic exists.
    x = cluster.by_id(frozen)
    x.stop()
    xprops = x.props.read_text().replace("zookeeper.session.timeout.ms=4000",
                                         f"zookeeper.session.timeout.ms={FROZEN_SESSION_MS}")
    x.props.write_text(xprops)
    x.start()
    await cluster.create_topic(TOPIC, assignment={0: [leader, frozen, c]})
    await cluster.wait_isr(TOPIC, 0, {leader, frozen, c})
    acked = []
    async with await connect(cluster.by_id(leader).bootstrap) as conn:
        # The state znode names the ISR before L has heard it leads (its LeaderAndIsr may still be
        # on the way): the first batch is sent again while L answers "unknown" or "not leader".
        async def first_acked() -> bool:
            r = await produce(conn, TOPIC, 0, [(None, b"acked-0")], acks=-1)
            assert r["error_code"] in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_FOR_PARTITION), r
            return r["error_code"] == 0
        await cluster.wait_for(f"broker {leader} leading {TOPIC}-0", first_acked, timeout=15)
        acked.append(b"acked-0")
        for i in range(1, N):
            value = b"acked-%d" % i
            r = await produce(conn, TOPIC, 0, [(None, value)], acks=-1)
            assert r["error_code"] == 0, r
            acked.append(value)
    cluster.by_id(leader).kill()
    x.pause()
    await cluster.wait_for("X elected while frozen", lambda: _leader_is(cluster, frozen), timeout=30)
    await cluster.wait_for("C elected after X's session expired", lambda: _leader_is(cluster, c), timeout=40)
    return cluster, {"L": leader, "X": frozen, "C": c}, acked


async def _leader_is(cluster: Cluster, broker: int) -> bool:
    return (await cluster.state(TOPIC, 0))["leader"] == broker


def _values(broker: BrokerProcess) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in decode_records(partition_bytes(broker, TOPIC, 0))]


async def test_leader_epochs_keep_the_acknowledged_message(tmp_path: Path, zk_server) -> None:  # noqa: ANN001
    cluster, roles, acked = await _scenario(tmp_path, zk_server.connect_string, None)
    try:
        c = cluster.by_id(roles["C"])
        async with await connect(c.bootstrap) as conn:
            r = await produce(conn, TOPIC, 0, [(None, b"after")], acks=1)
            assert r["error_code"] == 0, r
        assert [v for _, v in _values(c)] == [*acked, b"after"]
        # L and X come back as C's followers and truncate by epoch: nothing of C's is cut.
        cluster.by_id(roles["X"]).kill()
        cluster.by_id(roles["L"]).start()
        cluster.by_id(roles["X"]).start()
        await cluster.wait_isr(TOPIC, 0, {0, 1, 2}, timeout=60)
        async with await connect(c.bootstrap) as conn:
            r = await produce(conn, TOPIC, 0, [(None, b"last")], acks=-1)
            assert r["error_code"] == 0, r
        await wait_identical_replicas(cluster, TOPIC, 0, [0, 1, 2])
        for b in cluster.brokers:
            assert _values(b) == list(enumerate([*acked, b"after", b"last"])), b.broker_id
            epochs = (b.log_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint").read_text().splitlines()
            assert epochs[2] == "0 0" and epochs[-1].endswith(f" {N}"), epochs  # C's epoch starts at 10
    finally:
        for b in cluster.brokers:
            b.kill()
        await cluster.zk.close()


async def test_high_watermark_truncation_loses_the_message(tmp_path: Path, zk_server) -> None:  # noqa: ANN001
    cluster, roles, acked = await _scenario(tmp_path, zk_server.connect_string, source_tree(tmp_path, PRE_EPOCHS))
    try:
        c = cluster.by_id(roles["C"])
        assert [v for _, v in _values(c)] == acked[:-1]  # m, acknowledged, is not on the new leader
        cluster.by_id(roles["X"]).kill()
        cluster.by_id(roles["L"]).start()
        cluster.by_id(roles["X"]).start()
        await cluster.wait_isr(TOPIC, 0, {0, 1, 2}, timeout=60)
        await wait_identical_replicas(cluster, TOPIC, 0, [0, 1, 2])
        for b in cluster.brokers:
            assert acked[-1] not in [v for _, v in _values(b)], b.broker_id  # lost everywhere
    finally:
        for b in cluster.brokers:
            b.kill()
        await cluster.zk.close()
