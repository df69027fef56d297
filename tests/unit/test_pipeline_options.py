"""The Spark data source's pure parts: option parsing, offset resolution, the partitioner."""

from __future__ import annotations

import pytest

from pipeline.client import EARLIEST, LATEST, MinibrokerError, parse_bootstrap
from pipeline.options import ReadOptions, WriteOptions, parse_offsets
from pipeline.partitioner import RoundRobin, murmur2, partition_for_key


def test_bootstrap_parsing() -> None:
    assert parse_bootstrap("a:1, b:2,[::1]:3") == (("a", 1), ("b", 2), ("::1", 3))
    for bad in ("", "host", "host:x", ":9092"):
        with pytest.raises(MinibrokerError):
            parse_bootstrap(bad)


def test_offsets_option_forms() -> None:
    assert parse_offsets(None, "startingOffsets", "t", EARLIEST) == (EARLIEST, {})
    assert parse_offsets("latest", "startingOffsets", "t", EARLIEST) == (LATEST, {})
    assert parse_offsets('{"t": {"0": 23, "1": -2}}', "startingOffsets", "t", LATEST) == (LATEST, {0: 23, 1: -2})
    with pytest.raises(MinibrokerError, match="names topic"):
        parse_offsets('{"other": {"0": 1}}', "startingOffsets", "t", LATEST)
    with pytest.raises(MinibrokerError, match="must be >= 0"):
        parse_offsets('{"t": {"0": -3}}', "startingOffsets", "t", LATEST)
    with pytest.raises(MinibrokerError, match="JSON"):
        parse_offsets("{nope", "endingOffsets", "t", LATEST)


def test_read_and_write_options() -> None:
    r = ReadOptions.parse({"bootstrap.servers": "h:1", "TOPIC": "t", "timeout.ms": "3000"}, streaming=True)
    assert r.topic == "t" and r.starting == (LATEST, {}) and r.settings.connect_timeout_s == 3.0
    with pytest.raises(MinibrokerError, match="bootstrap.servers"):
        ReadOptions.parse({"topic": "t"}, streaming=False)
    with pytest.raises(MinibrokerError, match="one topic"):
        ReadOptions.parse({"bootstrap.servers": "h:1", "topic": "a,b"}, streaming=False)
    with pytest.raises(MinibrokerError, match="batch queries only"):
        ReadOptions.parse({"bootstrap.servers": "h:1", "topic": "t", "endingOffsets": "latest"}, streaming=True)
    w = WriteOptions.parse({"bootstrap.servers": "h:1", "acks": "1", "compression.type": "lz4"})
    assert (w.acks, w.codec, w.topic) == (1, 3, None)
    with pytest.raises(MinibrokerError, match="acks"):
        WriteOptions.parse({"bootstrap.servers": "h:1", "acks": "0"})


def test_timestamp_options_follow_spark() -> None:
    base = {"bootstrap.servers": "h:1", "topic": "t"}
    r = ReadOptions.parse(base | {"startingOffsetsByTimestamp": '{"t": {"0": 1700000000000, "1": 5}}'},
                          streaming=False)
    assert r.starting_by_timestamp == (None, {0: 1700000000000, 1: 5})
    assert r.starting_timestamp_strategy == "error" and r.ending_by_timestamp is None
    # startingTimestamp wins over startingOffsetsByTimestamp, as in Spark; the strategy is case-blind.
    r = ReadOptions.parse(base | {"startingTimestamp": "42", "startingOffsetsByTimestamp": '{"t": {"0": 1}}',
                                  "startingOffsetsByTimestampStrategy": "LATEST", "endingTimestamp": "99"},
                          streaming=False)
    assert r.starting_by_timestamp == (42, {}) and r.starting_timestamp_strategy == "latest"
    assert r.ending_by_timestamp == (99, {})
    assert ReadOptions.parse(base | {"startingTimestamp": "7"}, streaming=True).starting_by_timestamp == (7, {})
    bad = [({"startingTimestamp": "soon"}, "milliseconds"),
           ({"startingTimestamp": "-5"}, ">= 0"),
           ({"startingOffsetsByTimestamp": '{"other": {"0": 1}}'}, "names topic"),
           ({"startingOffsetsByTimestamp": '{"t": {"x": 1}}'}, "not a number"),
           ({"startingOffsetsByTimestamp": '{"t": {"0": "1"}}'}, "not a number"),
           ({"startingOffsetsByTimestamp": "{nope"}, "JSON"),
           ({"startingOffsetsByTimestampStrategy": "earliest"}, "'error' or 'latest'")]
    for extra, needle in bad:
        with pytest.raises(MinibrokerError, match=needle):
            ReadOptions.parse(base | extra, streaming=False)
    with pytest.raises(MinibrokerError, match="batch queries only"):
        ReadOptions.parse(base | {"endingOffsetsByTimestamp": '{"t": {"0": 1}}'}, streaming=True)


def test_murmur2_matches_kafka_vectors() -> None:
    # Kafka's UtilsTest.testMurmur2 vectors (signed int32 there).
    vectors = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829, b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
               b"abc": 479470107}
    for data, signed in vectors.items():
        assert murmur2(data) == signed & 0xFFFFFFFF, data
    assert partition_for_key(b"21", 4) == (-973932308 & 0x7FFFFFFF) % 4


def test_round_robin_starts_per_task() -> None:
    rr = RoundRobin(3)
    assert [rr.choose(4) for _ in range(5)] == [3, 0, 1, 2, 3]


def test_commit_group_option() -> None:
    base = {"bootstrap.servers": "h:1", "topic": "t"}
    assert ReadOptions.parse(base, streaming=True).commit_group is None
    # Spark passes option names case-insensitively; the value is kept as written.
    assert ReadOptions.parse(base | {"COMMITOFFSETSTOGROUP": " Lag-Watch "}, streaming=True).commit_group == "Lag-Watch"
    with pytest.raises(MinibrokerError, match="streaming queries only"):
        ReadOptions.parse(base | {"commitOffsetsToGroup": "g"}, streaming=False)
    with pytest.raises(MinibrokerError, match="is empty"):
        ReadOptions.parse(base | {"commitOffsetsToGroup": "  "}, streaming=True)
