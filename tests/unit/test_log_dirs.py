"""broker.log.dirs.partition_dir: a (topic, partition) maps to a direct child of the log dir, or is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.dirs import InvalidPartitionName, partition_dir


def test_legal_partition_is_a_direct_child(tmp_path: Path) -> None:
    assert partition_dir(tmp_path, "t.1_x-y", 3) == tmp_path / "t.1_x-y-3"


def test_log_dir_reached_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert partition_dir(tmp_path / "link", "t", 0) == tmp_path / "link" / "t-0"


@pytest.mark.parametrize("topic", ["", ".", "..", "../x", "/tmp/x", "a/b", "x" * 250, "a\n"])
def test_illegal_topic_refused(tmp_path: Path, topic: str) -> None:
    with pytest.raises(InvalidPartitionName):
        partition_dir(tmp_path, topic, 0)


def test_negative_partition_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidPartitionName):
        partition_dir(tmp_path, "t", -1)


def test_symlinked_partition_dir_leading_outside_refused(tmp_path: Path) -> None:
    # Defence in depth: even a legal name may not resolve outside the log dir.
    log_dir, outside = tmp_path / "logs", tmp_path / "elsewhere"
    log_dir.mkdir()
    outside.mkdir()
    (log_dir / "t-0").symlink_to(outside)
    with pytest.raises(InvalidPartitionName):
        partition_dir(log_dir, "t", 0)
