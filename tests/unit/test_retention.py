"""Retention (issue 17): broker/log/retention.py's pure rules on a fake clock, then the Log carrying
them out (asynchronous delete, log start offset, time rolls) on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.config import ConfigError, build_config
from broker.log import Log, OffsetOutOfRange
from broker.log.retention import RetentionPolicy, SegmentStat, plan_deletion, should_roll_on_time
from broker.log_config import log_config
from broker.zk.config_entities import TOPICS, InvalidConfig, validate
from protocol.records import record_batch
from protocol.records.records import decode_records

HOUR = 3_600_000
NOW = 1_800_000_000_000


def clock_at(now: int):  # noqa: ANN201
    return lambda: now


def segs(*spec: tuple[int, int, int]) -> list[SegmentStat]:
    return [SegmentStat(b, s, t) for b, s, t in spec]


# ---- the pure rules ----------------------------------------------------------------------


def test_time_retention_deletes_the_expired_prefix_never_the_active_segment() -> None:
    stats = segs((0, 100, NOW - 10 * HOUR), (10, 100, NOW - 5 * HOUR), (20, 100, NOW - 9 * HOUR),
                 (30, 100, NOW - 8 * HOUR))
    policy = RetentionPolicy(retention_ms=6 * HOUR)
    plan = plan_deletion(stats, high_watermark=40, log_start_offset=0, policy=policy, clock=clock_at(NOW))
    # The second segment is young: the prefix stops there though the third is old (Kafka's walk).
    assert plan.count == 1 and plan.reasons == (("retention_ms", 1),)
    # Everything expired: all but the active (last) segment go.
    later = plan_deletion(stats, 40, 0, policy, clock_at(NOW + 100 * HOUR))
    assert later.count == 3
    # Exactly retention.ms old is kept (Kafka: now - largestTimestamp > retentionMs).
    edge = plan_deletion(segs((0, 1, NOW - 6 * HOUR), (1, 1, NOW)), 2, 0, policy, clock_at(NOW))
    assert edge.count == 0


def test_nothing_at_or_above_the_high_watermark_is_deleted() -> None:
    stats = segs((0, 100, 0), (10, 100, 0), (20, 100, 0), (30, 100, 0))
    policy = RetentionPolicy(retention_ms=1)
    # A segment goes only when the next one starts at or below the high watermark.
    assert plan_deletion(stats, 19, 0, policy, clock_at(NOW)).count == 1
    assert plan_deletion(stats, 20, 0, policy, clock_at(NOW)).count == 2
    assert plan_deletion(stats, 0, 0, policy, clock_at(NOW)).count == 0


def test_size_retention_keeps_the_log_within_retention_bytes_plus_one_segment() -> None:
    stats = segs((0, 100, NOW), (10, 100, NOW), (20, 100, NOW), (30, 50, NOW))  # 350 bytes
    plan = plan_deletion(stats, 40, 0, RetentionPolicy(retention_ms=-1, retention_bytes=200), clock_at(NOW))
    # Over by 150: the oldest goes (150 - 100 >= 0), the next would take it below: kept.
    assert plan.count == 1 and plan.reasons == (("retention_bytes", 1),)
    assert plan_deletion(stats, 40, 0, RetentionPolicy(-1, 250), clock_at(NOW)).count == 1
    assert plan_deletion(stats, 40, 0, RetentionPolicy(-1, 350), clock_at(NOW)).count == 0
    assert plan_deletion(stats, 40, 0, RetentionPolicy(-1, 0), clock_at(NOW)).count == 3
    assert plan_deletion(stats, 40, 0, RetentionPolicy(-1, -1), clock_at(NOW)).count == 0


def test_time_then_size_then_log_start_in_kafkas_order() -> None:
    stats = segs((0, 100, NOW - 10 * HOUR), (10, 100, NOW), (20, 100, NOW), (30, 100, NOW))
    plan = plan_deletion(stats, 40, 0, RetentionPolicy(retention_ms=HOUR, retention_bytes=200), clock_at(NOW))
    # Time takes the first; size then sees 300 bytes against 200 and takes one more.
    assert plan.count == 2 and plan.reasons == (("retention_ms", 1), ("retention_bytes", 1))
    # A log start inside the third segment (a checkpoint) makes the two before it go.
    assert plan_deletion(stats, 40, 25, RetentionPolicy(-1, -1), clock_at(NOW)).reasons == (("log_start_offset", 2),)


def test_compact_only_policy_deletes_by_log_start_alone() -> None:
    stats = segs((0, 100, 0), (10, 100, 0), (20, 100, 0))
    compact = RetentionPolicy(retention_ms=1, retention_bytes=1, delete=False)
    assert plan_deletion(stats, 30, 0, compact, clock_at(NOW)).count == 0
    assert plan_deletion(stats, 30, 10, compact, clock_at(NOW)).count == 1


def test_time_roll_uses_the_first_batch_timestamp_else_the_creation_time() -> None:
    day = 24 * HOUR
    # Kafka's rule: the incoming batch's max timestamp against the first batch's.
    assert should_roll_on_time(10, day, NOW, 0, NOW + day + 1, clock_at(0))
    assert not should_roll_on_time(10, day, NOW, 0, NOW + day, clock_at(0))
    # Without a timestamp in the first batch: the wall clock against the segment's creation.
    assert should_roll_on_time(10, day, -1, NOW, -1, clock_at(NOW + day + 1))
    assert not should_roll_on_time(10, day, None, NOW, -1, clock_at(NOW + day))
    # An empty segment never rolls.
    assert not should_roll_on_time(0, day, None, 0, NOW, clock_at(NOW))


# ---- configuration -------------------------------------------------------------------------


def test_broker_retention_keys_follow_kafkas_precedence() -> None:
    assert build_config({"broker.id": "1"}).log_retention_time_ms == 168 * HOUR
    assert build_config({"broker.id": "1", "log.retention.hours": "1"}).log_retention_time_ms == HOUR
    both = {"broker.id": "1", "log.retention.hours": "1", "log.retention.minutes": "2"}
    assert build_config(both).log_retention_time_ms == 120_000
    assert build_config(both | {"log.retention.ms": "5"}).log_retention_time_ms == 5
    assert build_config({"broker.id": "1", "log.retention.ms": "-7"}).log_retention_time_ms == -1
    assert build_config({"broker.id": "1", "log.roll.hours": "2"}).log_roll_time_ms == 2 * HOUR
    assert build_config({"broker.id": "1", "log.roll.ms": "900"}).log_roll_time_ms == 900
    with pytest.raises(ConfigError, match="log.cleanup.policy"):
        build_config({"broker.id": "1", "log.cleanup.policy": "shred"})
    with pytest.raises(ConfigError, match="log.retention.check.interval.ms"):
        build_config({"broker.id": "1", "log.retention.check.interval.ms": "0"})


@pytest.mark.parametrize(("key", "value"), [
    ("retention.ms", "-2"), ("retention.ms", "soon"), ("retention.bytes", "-5"), ("retention.bytes", "1.5"),
    ("segment.bytes", "13"), ("segment.bytes", str(1 << 31)), ("segment.ms", "0"), ("file.delete.delay.ms", "-1"),
    ("cleanup.policy", "shred"), ("cleanup.policy", "compact,,delete"), ("cleanup.policy", ""),
])
def test_bad_topic_values_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(InvalidConfig) as e:
        validate(TOPICS, {key: value})
    assert e.value.key == key and key in str(e.value)


def test_topic_log_config_overrides_the_broker() -> None:
    broker = build_config({"broker.id": "1", "log.retention.minutes": "3", "log.roll.ms": "1000"})
    lc = log_config("t", {}, broker)
    assert (lc.retention.retention_ms, lc.segment_ms, lc.retention.delete) == (180_000, 1000, True)
    lc = log_config("t", {"retention.ms": "50", "retention.bytes": "9000", "segment.ms": "70",
                          "cleanup.policy": "compact"}, broker)
    assert (lc.retention.retention_ms, lc.retention.retention_bytes, lc.segment_ms) == (50, 9000, 70)
    assert not lc.retention.delete
    assert log_config("t", {"cleanup.policy": "compact, delete"}, broker).retention.delete
    # A value that does not parse (not written by our tools) falls back to the broker's.
    assert log_config("t", {"retention.ms": "x"}, broker).retention.retention_ms == 180_000


# ---- the log carrying it out ------------------------------------------------------------------


def batch(base: int, n: int, ts: int) -> bytes:
    return record_batch.build_batch([(ts, b"k%d" % (base + i), b"v" * 200, []) for i in range(n)], base_offset=base)


def fill(log: Log, batches: int, ts: int = NOW) -> None:
    for i in range(batches):
        log.append(batch(i * 5, 5, ts + i), i * 5 + 4)


def test_deleted_segments_move_the_start_and_in_flight_slices_stay_readable(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=2500, clock=clock_at(NOW))
    fill(log, 12)  # ~1.1 KB a batch: two a segment
    assert len(log.segments) == 6 and log.log_start_offset == 0
    in_flight = log.read(0, 1 << 20)
    gone = log.delete_oldest_segments(2)
    assert [s.base_offset for s in gone] == [0, 10]
    assert log.log_start_offset == 20 and log.segments[0].base_offset == 20
    assert (tmp_path / f"{0:020d}.log.deleted").exists() and not (tmp_path / f"{0:020d}.log").exists()
    # The fetch that got its slice before the delete still reads every byte of it.
    assert [r.offset for r in decode_records(in_flight.read_bytes())][:10] == list(range(10))
    with pytest.raises(OffsetOutOfRange):
        log.read(19, 1 << 20)
    assert [r.offset for r in decode_records(log.read(20, 1 << 20).read_bytes())][0] == 20
    log.finish_delete(gone)
    assert not list(tmp_path.glob("*.deleted"))
    # Never the active segment, whatever is asked.
    assert len(log.delete_oldest_segments(99)) == 3 and len(log.segments) == 1
    assert log.log_start_offset == log.segments[0].base_offset
    log.close()


def test_the_start_survives_a_reopen_and_deleted_files_left_by_a_crash_go(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=2500, clock=clock_at(NOW))
    fill(log, 8)
    log.delete_oldest_segments(1)
    start, end = log.log_start_offset, log.log_end_offset
    log.abandon()  # a crash before finish_delete: the .deleted files stay
    assert list(tmp_path.glob("*.deleted"))
    reopened = Log.open(tmp_path, segment_bytes=2500, log_start_offset=start)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, end)
    assert not list(tmp_path.glob("*.deleted"))
    reopened.close()
    # A checkpointed start inside the first segment holds; one past the end is clamped to it.
    inside = Log.open(tmp_path, segment_bytes=2500, log_start_offset=start + 3)
    assert inside.log_start_offset == start + 3
    with pytest.raises(OffsetOutOfRange):
        inside.read(start + 1, 1 << 20)
    inside.close()
    past = Log.open(tmp_path, segment_bytes=2500, log_start_offset=end + 100)
    assert past.log_start_offset == end
    past.close()


def test_segments_roll_on_time_by_record_timestamps(tmp_path: Path) -> None:
    log = Log.open(tmp_path, clock=clock_at(NOW))
    log.segment_ms = 1000
    log.append(batch(0, 2, NOW), 1)
    log.append(batch(2, 2, NOW + 1000), 3)  # exactly segment.ms later: no roll
    assert len(log.segments) == 1
    log.append(batch(4, 2, NOW + 1001), 5)
    assert [s.base_offset for s in log.segments] == [0, 4]
    log.close()
    # After a reopen the first batch's timestamp is read back from the file.
    again = Log.open(tmp_path, clock=clock_at(NOW))
    again.segment_ms = 1000
    again.append(batch(6, 1, NOW + 2001), 6)
    assert [s.base_offset for s in again.segments] == [0, 4]
    again.append(batch(7, 1, NOW + 2002), 7)
    assert [s.base_offset for s in again.segments] == [0, 4, 7]
    again.close()


def test_a_follower_restart_moves_the_start(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=2500)
    fill(log, 4)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert os.listdir(tmp_path)
    log.close()


# ---- the replica manager applying it ----------------------------------------------------------


def test_retention_on_a_replica_moves_epochs_snapshots_and_the_checkpoint(tmp_path: Path) -> None:
    from broker.log.producers import list_snapshots
    from broker.metrics import Registry
    from broker.replication.replica_manager import ReplicaManager
    from broker.zk.client import ZkClient
    from tests.support.batches import stamped_batch

    config = build_config({"broker.id": "1", "log.dirs": str(tmp_path), "log.retention.hours": "1"})
    ts = 1_700_000_000_000
    rm = ReplicaManager(config, ZkClient("127.0.0.1:1"), Registry(), wall_clock=clock_at(ts + 2 * HOUR))
    part = rm.become_follower("t", 0, [1, 2], 2, 0, [1, 2], 0, 1, 300)
    rm.set_log_config(part, log_config("t", {"segment.bytes": "300"}, config))
    offset = 0
    for epoch in range(4):
        for _ in range(3):
            rm.append_as_follower(part, stamped_batch(offset, 5, epoch, timestamp=ts), leader_hw=0)
            offset += 5
    assert len(part.log.segments) > 4 and list_snapshots(part.log.directory)
    # The high watermark bounds what may go: nothing yet above 0.
    assert rm.apply_retention_all() == 0
    rm.append_as_follower(part, b"", leader_hw=offset)
    segments = len(part.log.segments)
    assert rm.apply_retention_all() == segments - 1  # everything expired but the active segment
    start = part.log.log_start_offset
    assert start == part.log.segments[0].base_offset == part.log.segments[-1].base_offset > 0
    # Kafka's truncateFromStart: the earliest epoch entry now begins at the log start.
    assert part.epochs.epoch_for_offset(start) == 3 and part.epochs.epoch_for_offset(start - 1) in (None, 3)
    assert all(off >= start for off in list_snapshots(part.log.directory))
    assert (tmp_path / "log-start-offset-checkpoint").read_text().splitlines()[2] == f"t 0 {start}"
    # A log start inside a segment (DeleteRecords-like) also survives a restart through the file.
    (tmp_path / "log-start-offset-checkpoint").write_text(f"0\n1\nt 0 {start + 2}\n")
    part.log.abandon()
    again = ReplicaManager(config, ZkClient("127.0.0.1:1"), Registry())
    reopened = again.become_follower("t", 0, [1, 2], 2, 0, [1, 2], 0, 1, 300)
    assert reopened.log.log_start_offset == start + 2
    reopened.log.close()


def test_describe_configs_shows_retention_keys_in_ms_with_kafkas_synonyms() -> None:
    from broker.config_catalog import ConfigSource, topic_entries

    static = build_config({"broker.id": "1", "log.retention.minutes": "3", "log.roll.hours": "2"})
    entries = {e["name"]: e for e in topic_entries({"cleanup.policy": "compact"}, static, include_synonyms=True)}
    assert (entries["retention.ms"]["value"], entries["retention.ms"]["config_source"]) == (
        "180000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [s["name"] for s in entries["retention.ms"]["synonyms"]] == [
        "log.retention.minutes", "log.retention.hours"]  # log.retention.ms has no default: not listed
    assert entries["segment.ms"]["value"] == str(2 * HOUR)
    assert (entries["cleanup.policy"]["value"], entries["cleanup.policy"]["config_source"]) == (
        "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert entries["file.delete.delay.ms"]["value"] == "60000"
    assert build_config({"broker.id": "1", "log.retention.ms": "-9"}).log_retention_time_ms == -1
    minus = {e["name"]: e for e in topic_entries({}, build_config({"broker.id": "1", "log.retention.ms": "-9"}),
                                                 include_synonyms=False)}
    assert minus["retention.ms"]["value"] == "-1"
