"""The background index pass meeting a full disk, against a real broker.

A new segment's `.index` and `.timeindex` are created a few seconds after the segment, by the
replica manager's background pass (broker.log.index_files), not by the append that rolled it. An
error there is a storage error like any other: the log directory goes offline (one
`log_dir.failed`, no traceback), produces are answered KAFKA_STORAGE_ERROR, and every message
acknowledged before is still there after a restart. The unit tests inject the error; here the
file system runs out of inodes (a tmpfs with `nr_inodes`), so the two creations the pass needs
are the first to find none: the roll that made the segment (its `.log`) took the inodes left
but one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from tests.integration.test_storage_errors import broker_log_since, broker_on_tmpfs, read_all, try_produce
from tests.support.topics import create_topic, wait_leaders
from tests.support.waiting import wait_for
from tests.support.wire import connect

pytestmark = pytest.mark.integration

SEGMENT = "00000000000000000000"
# Inodes the rolling append takes (the new segment's .log; no producer-state snapshot for
# producer id -1) plus the one the index pass's first creation takes.
LEFT_FREE = 2


async def test_index_pass_on_a_full_disk_takes_the_dir_offline_and_loses_nothing(
        broker_factory, tmp_path: Path) -> None:  # noqa: ANN001
    disk = tmp_path / "disk"
    with broker_on_tmpfs(broker_factory, disk, "32m,nr_inodes=300") as b:
        await _index_pass_fails(b, disk)


async def _index_pass_fails(b, disk: Path) -> None:  # noqa: ANN001
    acked: dict[int, bytes] = {}
    part = disk / "logs" / "ix-0"  # log.dirs overridden: not b.log_dir
    async with await connect(b) as conn:
        await create_topic(conn, "ix", 1, configs={"segment.bytes": "1024"})
    first = [(b"k0", b"A" * 600)]
    code, base = await try_produce(b, "ix", 0, first, acks=-1)
    assert code == 0
    acked[base] = first[0][1]
    # The first segment's files, made by the pass a few seconds after the topic.
    await wait_for("the first segment's index files", lambda: (part / f"{SEGMENT}.index").exists()
                   and (part / f"{SEGMENT}.timeindex").exists(), timeout=20)
    # And the broker's checkpoints, written every 5 s: from then on each write takes an inode
    # only for a moment (a temporary file renamed over the old one).
    await wait_for("the checkpoint files", lambda: all((disk / "logs" / f).exists() for f in (
        "replication-offset-checkpoint", "log-start-offset-checkpoint")), timeout=20)
    log_start = b.log_path.stat().st_size

    # Inodes taken by fillers until LEFT_FREE remain, counted rather than run out (the broker's
    # checkpoints each take one for a moment: running out here would fail them instead).
    filler = disk / "filler"
    filler.mkdir()
    for i in range(os.statvfs(disk).f_ffree - LEFT_FREE):
        (filler / str(i)).touch()
    assert os.statvfs(disk).f_ffree == LEFT_FREE

    # Does not fit in the segment's 1024 bytes: it rolls, and its .log takes one.
    second = [(b"k1", b"B" * 600)]
    code, base = await try_produce(b, "ix", 0, second, acks=-1)
    assert code == 0, f"the rolling produce got {code!r}"
    acked[base] = second[0][1]
    new_segment = f"{base:020d}"
    assert (part / f"{new_segment}.log").exists()
    assert os.statvfs(disk).f_ffree == 1, sorted(p.name for p in part.iterdir())

    def failed() -> list[str]:
        return [line for line in broker_log_since(b, log_start).splitlines() if "log_dir.failed" in line]
    await wait_for("the index pass to fail the directory", failed, timeout=20)
    assert len(failed()) == 1 and "make index files" in failed()[0] and new_segment in failed()[0], failed()

    code, _ = await try_produce(b, "ix", 0, [(b"k2", b"refused")], acks=1)
    assert code == ErrorCode.KAFKA_STORAGE_ERROR, f"a produce into the offline dir got {code!r}"
    log_text = broker_log_since(b, log_start)
    assert "Traceback" not in log_text, log_text[-3000:]

    # Inodes back, a restart: every acknowledged message at its offset, and the log takes more.
    b.kill()
    for f in filler.iterdir():
        f.unlink()
    b.start()
    async with await connect(b) as conn:
        await wait_leaders(conn, "ix", 1, timeout=30)
        stored = await read_all(conn, "ix", 0)
    assert all(stored.get(o) == v for o, v in acked.items()), (acked.keys(), stored.keys())
    code, base = await try_produce(b, "ix", 0, [(b"k3", b"after")], acks=-1)
    assert code == 0 and base == max(stored) + 1
