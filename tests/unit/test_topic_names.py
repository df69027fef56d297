"""protocol.topic: Kafka's Topic.validate rules, and the per-partition answer built on them."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from protocol.topic import MAX_TOPIC_LENGTH, topic_name_error, topic_partition_error


@pytest.mark.parametrize("name", ["t", "a.b_c-D9", "..a", "a..", "-", "_", "x" * MAX_TOPIC_LENGTH])
def test_legal_names(name: str) -> None:
    assert topic_name_error(name) is None
    assert topic_partition_error(name, 0) == ErrorCode.NONE


@pytest.mark.parametrize("name", ["", None, ".", "..", "x" * (MAX_TOPIC_LENGTH + 1), "a/b", "/tmp/x", "../x",
                                  "a b", "a\n", "a\x00", "é", "a\\b", "*"])
def test_illegal_names(name: str | None) -> None:
    assert topic_name_error(name)
    assert topic_partition_error(name, 0) == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_negative_partition() -> None:
    assert topic_partition_error("t", -1) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert topic_partition_error("../t", -1) == ErrorCode.INVALID_TOPIC_EXCEPTION
