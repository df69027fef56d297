"""Empty partition directories found at start-up, on a real broker and a real ZooKeeper.

A LeaderAndIsr of many new partitions makes their directories ahead of their opens
(ReplicaManager.make_new_log_dirs: each an empty first segment). One cut short removes those no
state opened, but a crash in between leaves them, so the start that follows must take them
harmlessly: each is loaded as the empty log it is and waits for a role; a partition of the
cluster that names this broker a replica then starts from offset 0 as a new replica would, and
a directory no topic owns stays out of every answer. Kafka 2.8's LogManager loads such a
directory the same way (a log with one empty segment).
"""

from __future__ import annotations

import re

import pytest

from protocol.api_keys import ApiKey
from tests.support.topics import create_topic, topic_names
from tests.support.wire import connect, fetch, produce

pytestmark = pytest.mark.integration

FIRST_SEGMENT = "00000000000000000000.log"


async def test_empty_partition_directories_at_start_up(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory(0, start=False)
    b.log_dir.mkdir(parents=True)
    for name in ("ghost-0", "orphan-0"):  # as make_new_log_dir leaves them
        (b.log_dir / name).mkdir()
        (b.log_dir / name / FIRST_SEGMENT).write_bytes(b"")
    (b.log_dir / "ghost-1").mkdir()  # a crash between its mkdir and its first segment
    b.start()
    loaded = re.search(r"event='log\.loaded'.*", b.log_path.read_text())
    assert loaded is not None and "partitions=3" in loaded.group(0) and "failed=0" in loaded.group(0), loaded

    await create_topic(b, "ghost", 2)
    async with await connect(b) as conn:
        for p in range(2):
            got = await produce(conn, "ghost", p, [(None, b"first"), (None, b"second")], acks=-1)
            assert (got["error_code"], got["base_offset"]) == (0, 0), got
        parts = await fetch(conn, [("ghost", p, 0, 1 << 20) for p in range(2)])
        for p in range(2):
            assert parts[("ghost", p)]["error_code"] == 0
            assert parts[("ghost", p)]["high_watermark"] == 2
        lo = await conn.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
            {"name": "ghost", "partitions": [{"partition_index": p, "timestamp": -2} for p in range(2)]}]})
        assert [p["offset"] for p in lo["topics"][0]["partitions"]] == [0, 0]
    assert "orphan" not in await topic_names(b)  # a directory is not a topic
    assert sorted(p.name for p in (b.log_dir / "orphan-0").iterdir()) == [FIRST_SEGMENT]
