"""ListOffsets 0-6: the declaration against kafka-python's independent JSON-driven codec, and the
handler's rules (epoch checks, the high-watermark bound, v0's offsets) on a real log."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse

from broker.apis import list_offsets as handler
from broker.log import Log
from broker.log.leader_epoch_cache import LeaderEpochCache
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records.message_set import build_message_set
from protocol.schema import flexible, request_codec, response_codec


@pytest.mark.parametrize("version", range(7))
def test_requests_from_kafka_python_decode(version: int) -> None:
    topic, part = ListOffsetsRequest.ListOffsetsTopic, ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    raw = ListOffsetsRequest(version=version, replica_id=-1, isolation_level=1, topics=[topic(
        name="t", partitions=[part(partition_index=3, current_leader_epoch=7, timestamp=123, max_num_offsets=2)])],
    ).encode(version=version)
    want: dict = {"partition_index": 3, "timestamp": 123}
    if version == 0:
        want["max_num_offsets"] = 2
    if version >= 4:
        want["current_leader_epoch"] = 7
    got = request_codec(ApiKey.LIST_OFFSETS, version).decode(raw)
    assert got["topics"] == [{"name": "t", "partitions": [want]}]
    assert got.get("isolation_level") == (1 if version >= 2 else None)
    assert flexible(ApiKey.LIST_OFFSETS, version) == (version >= 6)


@pytest.mark.parametrize("version", range(7))
def test_our_responses_decode_with_kafka_python(version: int) -> None:
    part = {"partition_index": 3, "error_code": 0, "old_style_offsets": [9, 4], "timestamp": 9, "offset": 10,
            "leader_epoch": 2}
    raw = response_codec(ApiKey.LIST_OFFSETS, version).encode({"throttle_time_ms": 5, "topics": [
        {"name": "t", "partitions": [part]}]})
    got = ListOffsetsResponse.decode(bytes(raw), version=version).topics[0].partitions[0]
    assert got.partition_index == 3
    if version == 0:
        assert list(got.old_style_offsets) == [9, 4]
    else:
        assert (got.timestamp, got.offset) == (9, 10)
    if version >= 4:
        assert got.leader_epoch == 2


@dataclass
class FakePartition:
    log: Log
    leader_epoch: int = 5
    high_watermark: int = 0
    epochs: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    leader_epoch_start_offset: int = -1

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset


def test_current_leader_epoch_is_checked_like_kafka() -> None:
    part: Any = FakePartition(log=None, leader_epoch=5)  # type: ignore[arg-type]
    assert handler._check_epoch(part, -1) == ErrorCode.NONE
    assert handler._check_epoch(part, 5) == ErrorCode.NONE
    assert handler._check_epoch(part, 4) == ErrorCode.FENCED_LEADER_EPOCH
    assert handler._check_epoch(part, 6) == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_offsets_by_timestamp_stop_at_what_the_requester_may_read(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=64)
    log.append(build_message_set([(None, b"v", ts) for ts in (100, 200, 300, 400)], magic=1), 3)
    part: Any = FakePartition(log, leader_epoch=5, high_watermark=2)  # the handler's Partition, duck-typed
    find = handler._offset_for
    assert find(part, 150, client=True) == (200, 1, -1)
    assert find(part, 250, client=True) == (-1, -1, -1)  # offset 2 is not committed
    assert find(part, 250, client=False) == (300, 2, -1)  # a follower reads to the end
    assert find(part, 401, client=False) == (-1, -1, -1)  # past the end
    assert find(part, handler.LATEST, client=True) == (-1, 2, 5)
    assert find(part, handler.LATEST, client=False) == (-1, 4, 5)
    assert find(part, handler.EARLIEST, client=True) == (-1, 0, -1)  # magic 1: no epochs known
    part.epochs = LeaderEpochCache([(3, 0), (5, 2)])
    assert find(part, handler.EARLIEST, client=True) == (-1, 0, 3)  # the epoch that wrote the log start
    # v0: the log end (4) is above the high watermark, so a consumer gets the high watermark instead.
    assert handler._legacy_offsets(part, handler.LATEST, 5, client=True) == [2, 0]
    assert handler._legacy_offsets(part, handler.LATEST, 5, client=False) == [4, 0]
    log.close()


def test_a_new_leader_behind_its_epoch_start_has_no_latest_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=64)
    log.append(build_message_set([(None, b"v", ts) for ts in (100, 200, 300, 400)], magic=1), 3)
    # Elected at log end 4 while the high watermark it inherited is 2: Kafka's lagging-HW state.
    part: Any = FakePartition(log, leader_epoch=5, high_watermark=2, leader_epoch_start_offset=4)
    lags = handler._high_watermark_lags_epoch_start
    assert lags(part, handler.LATEST)
    assert not lags(part, handler.EARLIEST)
    assert not lags(part, 150)  # found at offset 1, below the high watermark: answered
    assert lags(part, 350)  # found at offset 3, not yet known to be committed
    assert lags(part, 999)  # found nowhere
    part.high_watermark = 4  # the followers caught up
    assert not lags(part, handler.LATEST)
    part.leader_epoch_start_offset = -1  # a follower (asked by a debugging client)
    part.high_watermark = 0
    assert not lags(part, handler.LATEST)
    log.close()


def test_the_lagging_leaders_error_is_kafkas_retriable_offset_not_available() -> None:
    # ListOffsets v5+ answers it (the handler named a member the enum lacked until mypy checked broker/).
    assert ErrorCode.OFFSET_NOT_AVAILABLE == 78 and ErrorCode.OFFSET_NOT_AVAILABLE.retriable
