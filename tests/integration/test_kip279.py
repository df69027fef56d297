"""KIP-279: two quick leader changes leave no diverging replicas (two real brokers, unclean elections).

Replicas [A, B], unclean.leader.election.enable=true, acks=1:

1. A leads epoch 0; both hold offsets 0-4.
2. B stops; A alone takes a-5..a-9 (offsets 5-9, epoch 0).
3. A is killed; B comes back and is elected (unclean) in a new epoch, taking b-5..b-7
   (offsets 5-7, B's epoch), then stops cleanly (its high watermark, 8, checkpointed).
4. A comes back and is elected (unclean) in a third epoch, from its log end 10, and takes
   a-10..a-12.
5. B returns as A's follower. Its latest epoch is one A never saw. A answers with the largest
   epoch it knows at or below it, 0, ending at 10; B's own epoch 0 ends at 5, so B cuts to 5
   (KIP-279's rule) and copies A's 5-12: the replicas end byte-identical.

With high-watermark truncation (the tree before leader epochs) B keeps 0-7 (its high
watermark is 8) and fetches from 8: offsets 5-7 differ between the replicas for good, which
`test_high_watermark_truncation_leaves_diverging_replicas` shows on that tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.zk.client import ZkClient
from protocol.records.records import decode_records
from tests.support.brokers import BrokerProcess
from tests.support.partition_state import isr_is, leader_is, registered
from tests.support.releases import PRE_EPOCHS, source_tree
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration

TOPIC = "kip279"
PROPS = {"unclean.leader.election.enable": "true", "replica.lag.time.max.ms": "3000",
         "replica.fetch.wait.max.ms": "200"}


async def _produce(broker: BrokerProcess, values: list[bytes]) -> None:
    """Each value alone, acks=1. A new leader may still refuse a moment after the znode names it:
    NOT_LEADER, LEADER_NOT_AVAILABLE, or UNKNOWN_TOPIC_OR_PARTITION from a broker just restarted
    that has not had its LeaderAndIsr yet (all retriable for Kafka's clients; nothing appended)."""
    async with await connect(broker) as c:
        for v in values:
            async def sent(v: bytes = v) -> bool:
                r = await produce(c, TOPIC, 0, [(None, v)], acks=1)
                assert r["error_code"] in (0, 3, 5, 6), r  # nothing appended unless 0
                return r["error_code"] == 0
            await wait_for(f"broker {broker.broker_id} to take {v!r}", sent, 20, interval=0.2)


def _values(broker: BrokerProcess) -> list[bytes | None]:
    return [r.value for r in decode_records(partition_bytes(broker, TOPIC, 0))]


async def _two_leader_changes(tmp_path: Path, zk_connect: str, source: Path | None) -> tuple[BrokerProcess, ...]:
    a = BrokerProcess(tmp_path, 0, zk_connect, PROPS, source=source)
    b = BrokerProcess(tmp_path, 1, zk_connect, PROPS, source=source)
    zk = ZkClient(zk_connect, 6000)
    await zk.start()
    try:
        a.start()
        b.start()
        await wait_for("2 registered brokers", lambda: registered(zk, 2))
        await create_topic(a, TOPIC, assignment={0: [0, 1]})
        await wait_for("ISR [0, 1]", lambda: isr_is(zk, TOPIC, [0, 1]))
        await _produce(a, [b"both-%d" % i for i in range(5)])
        await wait_for("B to hold 0-4", lambda: len(_values(b)) == 5)
        assert b.stop() == 0
        await wait_for("ISR [0]", lambda: isr_is(zk, TOPIC, [0]))
        await _produce(a, [b"a-%d" % i for i in range(5, 10)])
        a.kill()
        b.start()
        await wait_for("B to lead", lambda: leader_is(zk, TOPIC, 1))
        await _produce(b, [b"b-%d" % i for i in range(5, 8)])
        assert b.stop() == 0
        a.start()
        await wait_for("A to lead", lambda: leader_is(zk, TOPIC, 0))
        await _produce(a, [b"a-%d" % i for i in range(10, 13)])
        b.start()
        await wait_for("ISR [0, 1] again", lambda: isr_is(zk, TOPIC, [0, 1]), 60)
        await wait_for("B to catch up", lambda: len(_values(b)) == 13, 30)
    finally:
        await zk.close()
    return a, b


async def test_leader_epochs_leave_identical_replicas(tmp_path: Path, zk_server) -> None:  # noqa: ANN001
    a, b = await _two_leader_changes(tmp_path, zk_server.connect_string, None)
    try:
        expected = [b"both-%d" % i for i in range(5)] + [b"a-%d" % i for i in range(5, 13)]
        assert _values(a) == expected
        assert _values(b) == expected
        assert partition_bytes(a, TOPIC, 0) == partition_bytes(b, TOPIC, 0)
        assert "fetcher.truncating" in b.log() and "to=5" in b.log()
    finally:
        a.kill()
        b.kill()


async def test_high_watermark_truncation_leaves_diverging_replicas(tmp_path: Path, zk_server) -> None:  # noqa: ANN001
    a, b = await _two_leader_changes(tmp_path, zk_server.connect_string, source_tree(tmp_path, PRE_EPOCHS))
    try:
        assert _values(a)[5:8] == [b"a-5", b"a-6", b"a-7"]
        assert _values(b)[5:8] == [b"b-5", b"b-6", b"b-7"]  # the same offsets, different messages
        assert _values(a)[8:] == _values(b)[8:]
    finally:
        a.kill()
        b.kill()


