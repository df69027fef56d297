"""A follower whose log runs past its leader's (after an unclean election) truncates and follows.

Broker 0 leads with broker 1 in sync. Broker 1 stops; broker 0 takes more messages, then dies.
Broker 1 comes back and, with unclean.leader.election.enable, is elected with the shorter
log (10 messages) and takes new messages. When broker 0 returns as a follower it asks broker 1
(OffsetForLeaderEpoch) where its latest epoch, 0, ends: at 10, where broker 1's own epoch
began. Broker 0 truncates to 10 and replicates from there, so the two replicas end
byte-identical. (Before leader epochs broker 0 truncated only to the leader's log end, 15,
after an OFFSET_OUT_OF_RANGE, and offsets 10-14 held different messages on the two replicas.)
"""

from __future__ import annotations

import pytest

from broker.replication.replica_manager import CHECKPOINT
from broker.zk.client import ZkClient
from protocol.records.records import decode_records
from tests.support.cluster import FAST
from tests.support.partition_state import isr_is, leader_is, registered
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration


# A broker just named leader in ZooKeeper has not always had the controller's LeaderAndIsr yet:
# until then it answers UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER (nothing appended),
# which a client retries, as this does. Any other error fails the test.
RETRIABLE = {3, 6}


async def produce_to(broker, n: int, tag: bytes) -> None:  # noqa: ANN001
    async def appended() -> bool:
        async with await connect(broker) as c:
            r = await produce(c, "u", 0, [(b"k", tag + b"%d" % i) for i in range(n)], acks=1)
        assert r["error_code"] == 0 or r["error_code"] in RETRIABLE, r
        return r["error_code"] == 0
    await wait_for(f"{n} messages appended on broker {broker.broker_id}", appended, 30)


async def test_follower_beyond_the_leaders_log_truncates_and_follows(broker_factory, zk_server) -> None:  # noqa: ANN001
    opts = {k.replace(".", "_"): v for k, v in FAST.items()} | {"unclean_leader_election_enable": "true"}
    b0 = broker_factory(0, **opts)
    b1 = broker_factory(1, **opts)
    zk = ZkClient(zk_server.connect_string, 6000)
    await zk.start()
    try:
        await wait_for("2 registered brokers", lambda: registered(zk, 2))
        resp = await create_topic(b0, "u", assignment={0: [0, 1]}, check=False, timeout=20)
        assert resp["error_code"] == 0
        await wait_for("ISR [0, 1]", lambda: isr_is(zk, "u", [0, 1]))
        await produce_to(b0, 10, b"both-")
        await wait_for("identical replicas", lambda: _same(b0, b1))
        assert b1.stop() == 0
        await wait_for("ISR [0]", lambda: isr_is(zk, "u", [0]))
        await produce_to(b0, 50, b"lost-")  # only on broker 0, never replicated
        # Wait for the high watermark (60) to reach the checkpoint file (written every 5 s, as
        # Kafka's default), so that on its return broker 0 keeps its log and fetches from beyond
        # the leader's end. The file itself is the condition: a loaded machine may write it late.
        await wait_for("high watermark 60 in broker 0's checkpoint", lambda: _checkpointed(b0, "u", 0, 60), 60)
        b0.kill()
        b1.start()
        await wait_for("broker 1 to lead", lambda: leader_is(zk, "u", 1))  # unclean: broker 1 was not in the ISR
        await produce_to(b1, 5, b"new-")
        b0.start()
        await wait_for("broker 0 to truncate to 10", lambda: _truncated(b0))
        await produce_to(b1, 5, b"after-")
        await wait_for("identical replicas", lambda: _same(b0, b1), 30)
        records = [decode_records(partition_bytes(b, "u", 0)) for b in (b0, b1)]
        assert [r.offset for r in records[0]] == list(range(20))
        assert [r.value for r in records[0]] == [r.value for r in records[1]]
        assert [r.value for r in records[0]][10:15] == [b"new-%d" % i for i in range(5)]
    finally:
        await zk.close()


def _checkpointed(broker, topic: str, partition: int, offset: int) -> bool:  # noqa: ANN001
    """Kafka's replication-offset-checkpoint (version, count, then `topic partition offset` rows)
    lists `offset` for the partition."""
    try:
        rows = (broker.log_dir / CHECKPOINT).read_text().splitlines()[2:]
    except FileNotFoundError:
        return False
    return f"{topic} {partition} {offset}" in rows


async def _truncated(b0) -> bool:  # noqa: ANN001
    return "fetcher.truncating" in b0.log() and "to=10" in b0.log()


async def _same(b0, b1) -> bool:  # noqa: ANN001
    a, b = partition_bytes(b0, "u", 0), partition_bytes(b1, "u", 0)
    return bool(a) and a == b
