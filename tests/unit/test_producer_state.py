"""broker.log.producer_state and broker.log.producers: Kafka 2.8's ProducerStateManagerTest cases.

The rules run on an injected clock (timestamps passed in); the snapshot files use a real
directory and a real Log. kafka-python's DefaultRecordBatchBuilder makes the v2 batches, an
implementation independent of this project's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.config import ConfigError, build_config
from broker.log.log import Log
from broker.log.producer_state import (
    INT32_MAX,
    BatchMetadata,
    CorruptSnapshot,
    ProducerAppend,
    ProducerBatch,
    ProducerStateError,
    ProducerStates,
    decode_snapshot,
    producer_batches,
)
from broker.log.producers import PartitionProducers, list_snapshots, snapshot_path
from protocol.errors import ErrorCode
from protocol.layouts import ProducerSnapshot

PID = 1
EXPIRY_MS = 60 * 60 * 1000


def append(states: ProducerStates, pid: int, epoch: int, seq: int, offset: int, ts: int = 0,
           client: bool = True, count: int = 1) -> None:
    """Kafka's test helper: one batch of `count` records at `offset`, checked if from a client."""
    a = ProducerAppend(states, client)
    last_seq = (seq + count - 1) % (INT32_MAX + 1)
    a.add(pid, epoch, seq, last_seq, offset, offset + count - 1, ts)
    states.commit(a, offset + count)


def batch(pid: int, epoch: int, seq: int, count: int = 1, ts: int = 1000) -> ProducerBatch:
    return ProducerBatch(pid, epoch, seq, count - 1, ts, 0)


@pytest.fixture
def states() -> ProducerStates:
    return ProducerStates(EXPIRY_MS)


def code(exc: pytest.ExceptionInfo[ProducerStateError]) -> ErrorCode:
    return exc.value.error_code


def test_basic_id_mapping(states: ProducerStates) -> None:
    append(states, PID, 0, 0, 0)
    append(states, PID, 0, 1, 1)
    # A repeat appended (not caught as a duplicate first) is out of order, as in Kafka.
    with pytest.raises(ProducerStateError) as e:
        append(states, PID, 0, 1, 2)
    assert code(e) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(ProducerStateError) as e:
        append(states, PID, 0, 5, 2)  # a gap
    assert code(e) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(states, PID, 1, 0, 3)  # an epoch bump starts at 0
    with pytest.raises(ProducerStateError) as e:
        append(states, PID, 0, 0, 4)  # fenced: the old epoch
    assert code(e) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_zero(states: ProducerStates) -> None:
    append(states, PID, 0, 0, 0)
    with pytest.raises(ProducerStateError) as e:
        append(states, PID, 1, 3, 1)
    assert code(e) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(states, PID, 1, 0, 1)
    assert states.producers[PID].epoch == 1 and states.producers[PID].last_seq == 0
    assert len(states.producers[PID].batches) == 1  # the old epoch's batches are gone


def test_retried_batch_is_answered_with_its_original_offsets(states: ProducerStates) -> None:
    offset = 0
    for seq in range(0, 30, 5):  # six batches of five records: the first falls out of the last five
        staged = states.check_client([batch(PID, 0, seq, count=5)], offset)
        assert isinstance(staged, ProducerAppend)
        states.commit(staged, offset + 5)
        offset += 5
    dup = states.check_client([batch(PID, 0, 10, count=5)], offset)
    assert dup == BatchMetadata(last_seq=14, last_offset=14, offset_delta=4, timestamp=1000)
    assert dup.first_offset == 10 and dup.first_seq == 10
    latest = states.check_client([batch(PID, 0, 25, count=5)], offset)
    assert isinstance(latest, BatchMetadata) and latest.first_offset == 25
    # Older than the last five: no longer recognised, and out of order.
    with pytest.raises(ProducerStateError) as e:
        states.check_client([batch(PID, 0, 0, count=5)], offset)
    assert code(e) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # Same sequences under another epoch are not a duplicate.
    with pytest.raises(ProducerStateError):
        states.check_client([batch(PID, 1, 10, count=5)], offset)


def test_check_stages_nothing_until_commit(states: ProducerStates) -> None:
    append(states, PID, 0, 0, 0)
    staged = states.check_client([batch(PID, 0, 1)], 1)
    assert isinstance(staged, ProducerAppend)
    assert states.producers[PID].last_seq == 0  # Kafka's testPrepareUpdateDoesNotMutate
    states.commit(staged, 2)
    assert states.producers[PID].last_seq == 1 and states.map_end_offset == 2


def test_batches_of_one_append_are_checked_against_each_other(states: ProducerStates) -> None:
    append(states, PID, 0, 0, 99)
    staged = states.check_client([batch(PID, 0, 1, count=2), batch(PID, 0, 3, count=3)], 100)
    assert isinstance(staged, ProducerAppend)
    with pytest.raises(ProducerStateError):
        states.check_client([batch(PID, 0, 1, count=2), batch(PID, 0, 5)], 100)
    states.commit(staged, 105)
    entry = states.producers[PID]
    assert [(b.first_offset, b.last_offset) for b in entry.batches] == [(99, 99), (100, 101), (102, 104)]


def test_checked_against_appends_in_flight_as_if_committed(states: ProducerStates) -> None:
    # The writer thread's case: staged appends not yet committed; the next batch is checked against
    # the state they leave, the committed table untouched until each commits, in order.
    append(states, PID, 0, 0, 0, count=2)
    in_flight: list[ProducerAppend] = []
    offset = 2
    for seq in range(2, 12, 2):
        staged = states.check_client([batch(PID, 0, seq, count=2)], offset, in_flight)
        assert isinstance(staged, ProducerAppend)
        in_flight.append(staged)
        offset += 2
    assert states.producers[PID].last_seq == 1 and len(states.producers[PID].batches) == 1
    view = states.staged_entry(PID, in_flight)
    assert view is not None and view.last_seq == 11 and len(view.batches) == 5  # the last five
    # Duplicates: an in-flight batch (its offsets) and the committed one still among the last five
    # no longer (six batches in all: the committed one fell out, as it would once all commit).
    dup = states.check_client([batch(PID, 0, 8, count=2)], offset, in_flight)
    assert isinstance(dup, BatchMetadata) and (dup.first_offset, dup.last_offset) == (8, 9)
    with pytest.raises(ProducerStateError) as e:
        states.check_client([batch(PID, 0, 0, count=2)], offset, in_flight)
    assert code(e) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(ProducerStateError) as e:
        states.check_client([batch(PID, 0, 13)], offset, in_flight)  # a gap after the last in flight
    assert code(e) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    for a, end in zip(in_flight, range(4, 14, 2), strict=True):
        states.commit(a, end)
    committed = states.producers[PID]
    assert committed.last_seq == 11 and list(committed.batches) == list(view.batches)


def test_an_epoch_bump_in_flight_fences_the_old_epoch(states: ProducerStates) -> None:
    append(states, PID, 0, 0, 0)
    bump = states.check_client([batch(PID, 1, 0)], 1)
    assert isinstance(bump, ProducerAppend)
    with pytest.raises(ProducerStateError) as e:
        states.check_client([batch(PID, 0, 1)], 2, [bump])
    assert code(e) == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as e:
        states.check_client([batch(PID, 2, 5)], 2, [bump])
    assert code(e) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    follows = states.check_client([batch(PID, 1, 1)], 2, [bump])
    assert isinstance(follows, ProducerAppend)
    # Other producers' staged appends do not touch this one's view (the committed entry itself).
    assert states.staged_entry(PID + 1, [bump]) is None
    assert states.staged_entry(PID, []) is states.producers[PID]
    states.commit(bump, 2)
    states.commit(follows, 3)
    assert states.producers[PID].epoch == 1 and states.producers[PID].last_seq == 1
    assert len(states.producers[PID].batches) == 2


def test_unknown_producer_accepted_at_any_sequence(states: ProducerStates) -> None:
    # Kafka 2.8 (KIP-360): no state for the id, so any sequence starts it afresh.
    staged = states.check_client([batch(42, 3, 17)], 0)
    assert isinstance(staged, ProducerAppend)
    states.commit(staged, 1)
    assert states.producers[42].last_seq == 17


def test_sequence_wrap_around(states: ProducerStates) -> None:
    append(states, PID, 15, INT32_MAX, 735, client=False)
    append(states, PID, 15, 0, 1235)
    entry = states.producers[PID]
    assert entry.batches[0].first_seq == INT32_MAX and entry.last_seq == 0


def test_sequence_wrap_around_inside_a_batch(states: ProducerStates) -> None:
    states.replicate([ProducerBatch(PID, 15, INT32_MAX - 10, 20, 0, 0, base_offset=2000)], 2021)
    entry = states.producers[PID]
    assert entry.batches[-1].first_seq == INT32_MAX - 10 and entry.last_seq == 9
    assert entry.batches[-1].first_offset == 2000 and entry.last_offset == 2020
    assert batch(PID, 15, INT32_MAX - 10, count=21).last_sequence == 9


def test_invalid_wrap_around(states: ProducerStates) -> None:
    append(states, PID, 15, INT32_MAX, 735, client=False)
    with pytest.raises(ProducerStateError) as e:
        append(states, PID, 15, 1, 1235)
    assert code(e) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_no_checks_on_replication(states: ProducerStates) -> None:
    append(states, PID, 5, 16, 735, client=False)  # testNoValidationOnFirstEntryWhenLoadingLog
    assert states.producers[PID].last_seq == 16
    append(states, PID, 5, 30, 736, client=False)  # testAcceptAppendWithSequenceGapsOnReplica
    assert states.producers[PID].last_seq == 30
    append(states, PID, 3, 0, 737, client=False)  # an older epoch only warns in Kafka
    assert states.producers[PID].epoch == 3


def test_expiry_on_the_injected_clock(states: ProducerStates) -> None:
    append(states, PID, 5, 37, 1, ts=1000)
    assert states.remove_expired(1000 + EXPIRY_MS - 1) == 0
    assert states.remove_expired(1000 + EXPIRY_MS) == 1
    # Forgotten: the next sequence is accepted as from a new producer (testPidExpirationTimeout).
    append(states, PID, 5, 38, 2, ts=1000 + EXPIRY_MS)
    assert len(states) == 1 and states.producers[PID].last_seq == 38 and states.map_end_offset == 3


def test_snapshot_round_trip_and_kafka_layout(states: ProducerStates) -> None:
    append(states, PID, 0, 0, 0, ts=10, count=3)
    append(states, PID, 0, 3, 3, ts=20, count=2)
    append(states, 77, 2, 9, 5, ts=30, client=False)
    data = states.snapshot()
    parsed = ProducerSnapshot.parse(data)  # the construct declaration reads what struct wrote
    assert parsed.version == 1 and len(parsed.entries) == 2
    first = parsed.entries[0]
    assert (first.producer_id, first.epoch, first.last_sequence, first.last_offset, first.offset_delta,
            first.timestamp, first.coordinator_epoch, first.current_txn_first_offset) == (PID, 0, 4, 4, 1, 20, -1, -1)
    loaded = ProducerStates(EXPIRY_MS)
    loaded.load_snapshot(data, 6, now_ms=30)
    assert loaded.map_end_offset == 6
    # Only the last batch survives a snapshot (as in Kafka): its retry is still a duplicate.
    dup = loaded.check_client([batch(PID, 0, 3, count=2)], 6)
    assert isinstance(dup, BatchMetadata) and dup.first_offset == 3
    staged = loaded.check_client([batch(PID, 0, 5)], 6)
    assert isinstance(staged, ProducerAppend)
    with pytest.raises(ProducerStateError):
        loaded.check_client([batch(PID, 0, 7)], 6)
    # Expired producers are left out at load (testRemoveExpiredPidsOnReload).
    aged = ProducerStates(EXPIRY_MS)
    aged.load_snapshot(data, 6, now_ms=25 + EXPIRY_MS)
    assert set(aged.producers) == {77}


def test_corrupt_snapshots_are_refused(states: ProducerStates) -> None:
    append(states, PID, 0, 0, 0)
    data = states.snapshot()
    with pytest.raises(CorruptSnapshot):
        decode_snapshot(b"")
    with pytest.raises(CorruptSnapshot):
        decode_snapshot(data[:-3])  # truncated
    flipped = bytearray(data)
    flipped[-1] ^= 1
    with pytest.raises(CorruptSnapshot):
        decode_snapshot(bytes(flipped))
    with pytest.raises(CorruptSnapshot):
        decode_snapshot(b"\x00\x02" + data[2:])  # unknown version


# ---- with a real log and snapshot files ------------------------------------------------------------

def v2_batch(base_offset: int, pid: int, epoch: int, seq: int, count: int, ts: int = 1000) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i in range(count):
        b.append(i, timestamp=ts, key=None, value=b"v%d" % i, headers=[])
    raw = bytearray(b.build())
    raw[0:8] = base_offset.to_bytes(8, "big")
    return bytes(raw)


def write(log_: Log, producers: PartitionProducers, pid: int, epoch: int, seq: int, count: int) -> None:
    base = log_.log_end_offset
    data = v2_batch(base, pid, epoch, seq, count)
    log_.append(data, base + count - 1)
    producers.replicated(data)


def test_producer_batches_reads_kafka_python_batches() -> None:
    data = v2_batch(40, 9, 2, 100, 3) + v2_batch(43, -1, -1, -1, 2) + v2_batch(45, 9, 2, 103, 1)
    got = list(producer_batches(data))
    assert [(b.producer_id, b.epoch, b.base_sequence, b.last_sequence, b.base_offset, b.last_offset)
            for b in got] == [(9, 2, 100, 102, 40, 42), (9, 2, 103, 103, 45, 45)]
    assert list(producer_batches(data[:-5])) == got[:1]  # a torn tail is left out


def test_restart_loads_the_snapshot_and_scans_only_after_it(tmp_path: Path) -> None:
    log_ = Log.open(tmp_path, segment_bytes=400)
    producers = PartitionProducers(log_, EXPIRY_MS)
    producers.load(0, clean_shutdown=False)
    for i in range(8):
        write(log_, producers, PID, 0, 3 * i, 3)
    assert len(log_.segments) > 1
    snaps = list_snapshots(tmp_path)
    assert snaps and snaps[-1] <= log_.log_end_offset  # written at each roll
    write(log_, producers, 2, 0, 0, 1)
    end = log_.log_end_offset
    producers.close()
    log_.close()
    # As after a crash: no snapshot at the log end, only the one from the last roll.
    snapshot_path(tmp_path, end).unlink()
    assert list_snapshots(tmp_path)[-1] < end

    reopened = Log.open(tmp_path, segment_bytes=400)
    rebuilt = PartitionProducers(reopened, EXPIRY_MS)
    rebuilt.load(0, clean_shutdown=False)
    assert rebuilt.states.map_end_offset == end
    assert rebuilt.states.producers[PID].last_seq == 23 and rebuilt.states.producers[2].last_seq == 0
    dup = rebuilt.states.check_client([batch(PID, 0, 21, count=3)], end)
    assert isinstance(dup, BatchMetadata) and dup.first_offset == 21
    rebuilt.close()
    reopened.close()
    assert list_snapshots(tmp_path)[-1] == end


def test_corrupt_snapshot_falls_back_to_an_earlier_one(tmp_path: Path) -> None:
    log_ = Log.open(tmp_path, segment_bytes=400)
    producers = PartitionProducers(log_, EXPIRY_MS)
    producers.load(0, clean_shutdown=False)
    for i in range(8):
        write(log_, producers, PID, 0, 3 * i, 3)
    producers.close()
    log_.close()
    latest = list_snapshots(tmp_path)[-1]
    snapshot_path(tmp_path, latest).write_bytes(b"\x00\x01garbage")
    reopened = Log.open(tmp_path, segment_bytes=400)
    rebuilt = PartitionProducers(reopened, EXPIRY_MS)
    rebuilt.load(0, clean_shutdown=False)
    assert latest not in list_snapshots(tmp_path)
    assert rebuilt.states.producers[PID].last_seq == 23
    reopened.close()


def test_truncation_drops_later_snapshots_and_reloads(tmp_path: Path) -> None:
    log_ = Log.open(tmp_path, segment_bytes=400)
    producers = PartitionProducers(log_, EXPIRY_MS)
    producers.load(0, clean_shutdown=False)
    for i in range(20):  # one record each: the log's offsets are plain for any message format
        write(log_, producers, PID, 0, i, 1)
    assert len(list_snapshots(tmp_path)) > 2
    log_.truncate_to(9)
    producers.truncated(0)
    assert all(off <= 9 for off in list_snapshots(tmp_path))
    assert producers.states.map_end_offset == 9 and producers.states.producers[PID].last_seq == 8
    staged = producers.states.check_client([batch(PID, 0, 9)], 9)
    assert isinstance(staged, ProducerAppend)
    producers.restarted_at(50)
    log_.truncate_fully_and_start_at(50)
    assert list_snapshots(tmp_path) == [] and len(producers.states) == 0
    log_.close()


def test_clean_log_without_snapshot_is_not_scanned(tmp_path: Path) -> None:
    # The upgrade case (Kafka 2.8 skips it too): a clean log from the release before, no snapshot.
    log_ = Log.open(tmp_path)
    log_.append(v2_batch(0, PID, 0, 0, 1), 0)
    log_.append(v2_batch(1, PID, 0, 1, 1), 1)
    log_.close()
    reopened = Log.open(tmp_path)
    producers = PartitionProducers(reopened, EXPIRY_MS)
    producers.load(0, clean_shutdown=True)
    assert len(producers.states) == 0 and list_snapshots(tmp_path) == []  # an empty table: nothing written
    reopened.close()


def test_a_close_with_no_producer_and_no_snapshot_writes_none(tmp_path: Path) -> None:
    """A log no idempotent producer wrote to (magic 1, or v2 without a producer id) leaves no
    snapshot at its close: the clean open reads an empty table without one, and after a crash
    the log is read (Kafka's rule with no snapshot), finding the same."""
    log_ = Log.open(tmp_path)
    producers = PartitionProducers(log_, EXPIRY_MS)
    producers.load(0, clean_shutdown=False)
    log_.append(v2_batch(0, -1, -1, -1, 2), 1)
    producers.replicated(v2_batch(0, -1, -1, -1, 2))
    producers.close()
    log_.close()
    assert list_snapshots(tmp_path) == []
    for clean in (True, False):
        reopened = Log.open(tmp_path, clean_shutdown=clean)
        again = PartitionProducers(reopened, EXPIRY_MS)
        again.load(0, clean_shutdown=clean)
        assert len(again.states) == 0 and again.states.map_end_offset == 2
        reopened.abandon()


def test_a_close_with_producers_or_an_earlier_snapshot_writes_one(tmp_path: Path) -> None:
    log_ = Log.open(tmp_path)
    producers = PartitionProducers(log_, EXPIRY_MS)
    producers.load(0, clean_shutdown=False)
    log_.append(v2_batch(0, PID, 0, 0, 1), 0)
    producers.replicated(v2_batch(0, PID, 0, 0, 1))
    producers.close()
    assert list_snapshots(tmp_path) == [1]
    producers.states.clear(1)  # expired since, say: an earlier snapshot exists, so the close writes one
    log_.append(v2_batch(1, -1, -1, -1, 1), 1)
    producers.close()
    assert list_snapshots(tmp_path) == [1, 2]
    log_.close()


def test_expiry_key_is_kafka_28s() -> None:
    assert build_config({"broker.id": "1"}).transactional_id_expiration_ms == 604_800_000  # 7 days
    assert build_config({"broker.id": "1", "transactional.id.expiration.ms": "1000"}).transactional_id_expiration_ms == 1000
    with pytest.raises(ConfigError, match="transactional.id.expiration.ms"):
        build_config({"broker.id": "1", "transactional.id.expiration.ms": "0"})


def test_crash_rebuilds_from_the_last_roll_snapshot_and_the_log(tmp_path: Path) -> None:
    log_ = Log.open(tmp_path, segment_bytes=400)
    producers = PartitionProducers(log_, EXPIRY_MS)
    producers.load(0, clean_shutdown=False)
    for i in range(8):
        write(log_, producers, PID, 0, 3 * i, 3)
    write(log_, producers, 2, 4, 100, 2)
    end = log_.log_end_offset
    log_.abandon()  # kill -9: no close, no snapshot at the end, log recovered at open
    snapshot_path(tmp_path, end).unlink(missing_ok=True)  # (had the last batch just rolled a segment)
    assert list_snapshots(tmp_path)[-1] < end

    reopened = Log.open(tmp_path, segment_bytes=400)
    assert reopened.log_end_offset == end
    rebuilt = PartitionProducers(reopened, EXPIRY_MS)
    rebuilt.load(0, clean_shutdown=False)
    assert rebuilt.states.map_end_offset == end
    assert rebuilt.states.producers[PID].last_seq == 23 and rebuilt.states.producers[2].last_seq == 101
    assert [(b.first_offset, b.last_offset) for b in rebuilt.states.producers[PID].batches][-1] == (21, 23)
    reopened.close()
