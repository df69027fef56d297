"""`log.page.cache.window.bytes` on real brokers: the pages behind a small window leave the page
cache on the leader (its writer thread's appends) and on the follower (appends on its loop),
every message is still read back exactly by real clients from either, and DescribeConfigs shows
the key. (Which pages stay is checked exactly in tests/unit/test_page_cache_window.py; here the
drops depend on writeback finishing in time, so only most pages behind are required gone.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support.brokers import BrokerProcess, start_together
from tests.support.page_cache import PAGE, resident_pages, skip_unless_droppable
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic
from tests.support.traffic import produce_numbered, read_partition

COUNT = 60_000
WINDOW = 1 << 20
SEGMENT = 8 << 20


def value(i: int) -> bytes:
    return b"%08d-" % i + bytes([65 + i % 26]) * 191


def produce_all(bootstrap: str, topic: str) -> None:
    produce_numbered(bootstrap, topic, COUNT, value, linger_ms=5, batch_size=64_000)


def log_size(broker: BrokerProcess, topic: str) -> int:
    return sum(p.stat().st_size for p in (broker.log_dir / f"{topic}-0").glob("*.log"))


def share_cached_behind_the_window(broker: BrokerProcess, topic: str) -> tuple[float, int]:
    """Of the pages more than the window (and two steps' slack) behind each segment's end, the
    share still in the page cache, and how many such pages there are."""
    cached = total = 0
    for path in sorted((broker.log_dir / f"{topic}-0").glob("*.log")):
        pages = resident_pages(Path(path))
        behind = pages[:max(0, len(pages) - (WINDOW + (2 << 20)) // PAGE)]
        cached += sum(behind)
        total += len(behind)
    return (cached / total if total else 1.0), total


async def test_a_small_window_drops_pages_behind_and_every_message_reads_back(broker_factory, tmp_path: Path) -> None:  # noqa: ANN001
    skip_unless_droppable(tmp_path)  # the brokers' log dirs are under it
    brokers = [broker_factory(i, start=False, log_page_cache_window_bytes=str(WINDOW),
                              log_segment_bytes=str(SEGMENT), replica_fetch_wait_max_ms="100") for i in range(2)]
    start_together(brokers)
    leader, follower = brokers
    # Pages are checked where nothing reads them before the check (a read caches what it reads
    # again): a leader's on a topic without a follower (its writer thread's appends), and the
    # follower's copy of a replicated one (appends on its loop; a follower fetching from the
    # leader re-reads the leader's pages, not its own).
    await create_topic(leader, "alone", assignment={0: [0]})
    await create_topic(leader, "windowed", assignment={0: [0, 1]})
    await asyncio.to_thread(produce_all, leader.bootstrap, "alone")
    await asyncio.to_thread(produce_all, leader.bootstrap, "windowed")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and log_size(follower, "windowed") < log_size(leader, "windowed"):
        await asyncio.sleep(0.2)

    for broker, topic in ((leader, "alone"), (follower, "windowed")):
        share, pages = share_cached_behind_the_window(broker, topic)
        assert pages > 1000, pages  # ~12 MB in two segments: most of each is behind a 1 MiB window
        assert share < 0.5, f"{topic} on broker {broker.broker_id}: {share:.0%} of {pages} pages behind the window still cached"
    assert partition_bytes(follower, "windowed", 0) == partition_bytes(leader, "windowed", 0)

    got = await asyncio.to_thread(read_partition, leader.bootstrap, "alone", 0, COUNT)
    assert got == [(i, value(i)) for i in range(COUNT)]
    got = await asyncio.to_thread(read_partition, leader.bootstrap, "windowed", 0, COUNT)
    assert got == [(i, value(i)) for i in range(COUNT)]

    # The follower's copy, read by a client once it leads: the leader stops, the follower takes over.
    leader.kill()
    got = await asyncio.to_thread(read_partition, follower.bootstrap, "windowed", 0, COUNT)
    assert got == [(i, value(i)) for i in range(COUNT)]


def test_describe_configs_shows_the_window(broker_factory) -> None:  # noqa: ANN001
    broker = broker_factory(0, log_page_cache_window_bytes="-1")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")])
    entries = next(iter(described.values())).result(30)
    assert entries["log.page.cache.window.bytes"].value == "-1"
