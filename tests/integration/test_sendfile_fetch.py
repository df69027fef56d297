"""Fetch answered with sendfile (issue 21): consumers and followers get the log exactly as stored.

A real broker on a real socket, real clients. Record sets of SENDFILE_FROM bytes or more go from
the segment file to the socket by sendfile; smaller ones are read with pread. Both answers are
compared with the segment file itself, every message is read back by kcat and confluent-kafka,
and a follower's replica (its fetches answered the same way) ends byte-identical to the leader's.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

from broker.apis.fetch import SENDFILE_FROM
from tests.support.brokers import BrokerProcess, start_together
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic
from tests.support.traffic import produce_numbered, read_partition
from tests.support.wire import connect, fetch

COUNT = 30_000


def value(i: int) -> bytes:
    return b"%08d-" % i + bytes([65 + i % 26]) * 91


def produce_all(bootstrap: str, topic: str) -> None:
    produce_numbered(bootstrap, topic, COUNT, value, linger_ms=20, batch_size=8_000)


async def test_a_fetch_by_sendfile_is_the_log_as_stored_and_clients_read_it_all(broker_factory) -> None:  # noqa: ANN001
    broker: BrokerProcess = broker_factory(0, log_segment_bytes=str(1 << 20))
    await create_topic(broker, "zero-copy", 1)
    await asyncio.to_thread(produce_all, broker.bootstrap, "zero-copy")
    first_segment = sorted((broker.log_dir / "zero-copy-0").glob("*.log"))[0].read_bytes()
    async with await connect(broker) as conn:
        # Fetch v4: the log as stored. Large: one sendfile'd piece; small: pread into the head.
        large = (await fetch(conn, [("zero-copy", 0, 0, 8 << 20)], version=4))[("zero-copy", 0)]
        small = (await fetch(conn, [("zero-copy", 0, 0, SENDFILE_FROM // 2)], version=4))[("zero-copy", 0)]
    assert large["error_code"] == 0 and small["error_code"] == 0
    assert len(large["records"]) >= SENDFILE_FROM and 0 < len(small["records"]) < SENDFILE_FROM
    assert bytes(large["records"]) == first_segment[:len(large["records"])]
    assert bytes(small["records"]) == first_segment[:len(small["records"])]

    kcat = await asyncio.to_thread(
        subprocess.run, ["kcat", "-b", broker.bootstrap, "-C", "-t", "zero-copy", "-o", "beginning", "-e", "-q",
                         "-X", "max.partition.fetch.bytes=4194304", "-f", "%o %s\n"],
        capture_output=True, check=True, timeout=120)
    assert kcat.stdout.splitlines() == [b"%d %s" % (i, value(i)) for i in range(COUNT)]
    got = await asyncio.to_thread(read_partition, broker.bootstrap, "zero-copy", 0, COUNT)
    assert got == [(i, value(i)) for i in range(COUNT)]


async def test_a_follower_fed_by_sendfile_holds_the_leaders_bytes(broker_factory) -> None:  # noqa: ANN001
    brokers = [broker_factory(i, start=False, log_segment_bytes=str(1 << 20), replica_fetch_wait_max_ms="100")
               for i in range(2)]
    start_together(brokers)
    leader, follower = brokers
    await create_topic(leader, "replicated", assignment={0: [0, 1]})
    await asyncio.to_thread(produce_all, leader.bootstrap, "replicated")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        theirs = partition_bytes(follower, "replicated", 0)
        if len(theirs) >= len(partition_bytes(leader, "replicated", 0)):
            break
        await asyncio.sleep(0.2)
    assert partition_bytes(follower, "replicated", 0) == partition_bytes(leader, "replicated", 0)
    assert len(partition_bytes(leader, "replicated", 0)) > COUNT * 100
