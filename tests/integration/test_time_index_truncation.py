"""Follower truncation keeps the time index consistent with the log it cuts.

Two brokers with small segments. Broker 0 leads with broker 1 in sync; broker 1 stops; broker 0
takes messages with later timestamps that broker 1 never gets, then dies; broker 1 is elected
(unclean) and takes messages with earlier timestamps; broker 0 comes back, truncates and follows.
Each replica then answers ListOffsets by timestamp (broker 0 as a follower, asked with the
debugging replica id -2) exactly as a scan of its own segment files does, before and after a
clean restart, and broker 0's .timeindex files hold no offset beyond its log.
"""

from __future__ import annotations

import pytest

from broker.log.time_index import TimeIndex
from broker.zk.client import ZkClient
from protocol.api_keys import ApiKey
from protocol.records.records import decode_records
from tests.support.brokers import BrokerProcess
from tests.support.cluster import FAST
from tests.support.partition_state import isr_is, leader_is, registered
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration

BASE = 1_700_000_000_000
TARGETS = [0, BASE + 5, BASE + 500, BASE + 2000, BASE + 2003, BASE + 3000, BASE + 3100, BASE + 5000,
           BASE + 5049, BASE + 9000]


async def produce_to(broker: BrokerProcess, n: int, tag: bytes, first_timestamp: int) -> None:
    async with await connect(broker) as c:
        for start in range(0, n, 10):  # batches of 10, each well below segment.bytes
            r = await produce(c, "u", 0, [(b"k", tag + b"%d" % i) for i in range(start, min(n, start + 10))],
                              acks=1, first_timestamp=first_timestamp + start)
            assert r["error_code"] == 0, r


async def answers(broker: BrokerProcess, replica_id: int) -> list[int]:
    """ListOffsets v1 for each target timestamp, one request each; the offsets answered."""
    out = []
    async with await connect(broker) as c:
        for t in TARGETS:
            resp = await c.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": replica_id, "topics": [
                {"name": "u", "partitions": [{"partition_index": 0, "timestamp": t}]}]})
            (p,) = resp["topics"][0]["partitions"]
            assert p["error_code"] == 0, p
            out.append(p["offset"])
    return out


def scanned(broker: BrokerProcess) -> list[int]:
    """What the broker's own segment files say: the first offset with a timestamp >= T, else -1."""
    records = decode_records(partition_bytes(broker, "u", 0))
    return [next((r.offset for r in records if r.timestamp >= t), -1) for t in TARGETS]


def time_indexes_within_log(broker: BrokerProcess) -> bool:
    d = broker.log_dir / "u-0"
    end = max(r.offset for r in decode_records(partition_bytes(broker, "u", 0))) + 1
    for path in d.glob("*.timeindex"):
        index = TimeIndex.parse(int(path.name.split(".")[0]), path.read_bytes())
        assert index is not None, path
        if any(e.offset >= end for e in index.entries):
            return False
    return True


def _checkpointed(broker: BrokerProcess, row: str) -> bool:
    try:
        return row in (broker.log_dir / "replication-offset-checkpoint").read_text().splitlines()
    except OSError:
        return False


async def test_follower_truncation_keeps_the_time_index_consistent(broker_factory, zk_server) -> None:  # noqa: ANN001
    opts = {k.replace(".", "_"): v for k, v in FAST.items()} | {
        "unclean_leader_election_enable": "true", "log_segment_bytes": "700"}
    b0 = broker_factory(0, **opts)
    b1 = broker_factory(1, **opts)
    zk = ZkClient(zk_server.connect_string, 6000)
    await zk.start()
    try:
        await wait_for("2 registered brokers", lambda: registered(zk, 2))
        assert (await create_topic(b0, "u", assignment={0: [0, 1]}, check=False, timeout=20))["error_code"] == 0
        await wait_for("ISR [0, 1]", lambda: isr_is(zk, "u", [0, 1]))
        await produce_to(b0, 10, b"both-", BASE)
        await wait_for("ISR [0, 1] and 10 on broker 1", lambda: _has(b1, 10))
        assert b1.stop() == 0
        await wait_for("ISR [0]", lambda: isr_is(zk, "u", [0]))
        await produce_to(b0, 50, b"lost-", BASE + 5000)  # only on broker 0, never replicated
        assert len(list((b0.log_dir / "u-0").glob("*.log"))) >= 2  # rolled: sealed time index entries
        # The high watermark reaches the checkpoint (written every 5 s), so broker 0 keeps its log.
        await wait_for("broker 0's high watermark 60 in its checkpoint", lambda: _checkpointed(b0, "u 0 60"), 30)
        b0.kill()
        b1.start()
        await wait_for("broker 1 to lead", lambda: leader_is(zk, "u", 1))
        # The state znode names broker 1 before the controller's LeaderAndIsr reaches it.
        await wait_for("broker 1 to answer as leader", lambda: _hosts(b1, -1))
        await produce_to(b1, 5, b"new-", BASE + 2000)
        b0.start()
        await wait_for("broker 0 to truncate", lambda: "fetcher.truncating" in b0.log())
        await produce_to(b1, 5, b"after-", BASE + 3000)
        await wait_for("broker 0 caught up", lambda: _has(b0, 20), 30)

        assert await answers(b1, -1) == scanned(b1)
        assert await answers(b0, -2) == scanned(b0)  # the follower's own log
        assert scanned(b0)[TARGETS.index(BASE + 9000)] == -1
        assert b0.stop() == 0
        # The active segment's index files are written at roll, flush and close (issue 21): what a
        # clean shutdown leaves, and the next start trusts, holds nothing past the truncated log.
        assert time_indexes_within_log(b0)
        b0.start()
        await wait_for("broker 0 back in sync", lambda: isr_is(zk, "u", [0, 1]), 30)
        # The ISR znode may still name broker 0 from before its restart; it answers for u-0 once
        # the controller's LeaderAndIsr has reached it (UNKNOWN_TOPIC_OR_PARTITION until then).
        await wait_for("broker 0 to host u-0 again", lambda: _hosts(b0), 30)
        assert await answers(b0, -2) == scanned(b0)
    finally:
        await zk.close()


async def _has(b: BrokerProcess, n: int) -> bool:
    records = decode_records(partition_bytes(b, "u", 0))
    return len(records) >= n and records[-1].offset >= n - 1




async def _hosts(b: BrokerProcess, replica_id: int = -2) -> bool:
    """Whether `b` answers ListOffsets for u-0: as its leader (replica_id -1) or at all (-2)."""
    async with await connect(b) as c:
        resp = await c.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": replica_id, "topics": [
            {"name": "u", "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
    return bool(resp["topics"][0]["partitions"][0]["error_code"] == 0)
