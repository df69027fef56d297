"""leader-epoch-checkpoint: Kafka's file format, atomic rewrite, and a rebuild from the log's batches
when the file is missing or does not parse."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from broker.log import Log, leader_epoch_checkpoint
from broker.log.leader_epoch_cache import EpochEntry
from broker.log.leader_epoch_checkpoint import (
    CLAIMED,
    DONE,
    FILENAME,
    RUNNING,
    SUPERSEDED,
    CorruptCheckpoint,
    DeferredSyncs,
    Job,
    LeaderEpochFile,
    parse,
    render,
)
from protocol.records.epochs import epoch_runs, partition_leader_epoch
from protocol.records.message_set import build_message_set
from tests.support.batches import stamped_batch as batch


def append(plog: Log, data: bytes, count: int) -> None:
    plog.append(data, plog.log_end_offset + count - 1)


def test_file_format_is_kafkas() -> None:
    text = render([(0, 0), (3, 120), (7, 9000)])
    assert text == "0\n3\n0 0\n3 120\n7 9000\n"
    assert parse(text) == [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(7, 9000)]
    assert parse("") == []  # Kafka's CheckpointFile creates the file empty
    assert parse("0\n0\n") == []


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\n1 5\n", "0\n1\n1\n", "0\n1\n1 x\n", "zero\n", "0\n1\n1 2 3\n"])
def test_malformed_files_are_refused(text: str) -> None:
    with pytest.raises(CorruptCheckpoint):
        parse(text)


def test_round_trip_through_the_file(tmp_path: Path) -> None:
    plog = Log.open(tmp_path / "t-0")
    append(plog, batch(0, 3, 0), 3)
    epochs = LeaderEpochFile.open(plog)
    epochs.assign(5, 3)
    append(plog, batch(3, 2, 5), 2)
    epochs.assign_from(batch(3, 2, 5))  # same epoch again: no change
    epochs.assign(6, 5)  # a new leader's epoch, before its first message
    path = tmp_path / "t-0" / FILENAME
    assert path.read_text() == "0\n3\n0 0\n5 3\n6 5\n"
    assert not (tmp_path / "t-0" / (FILENAME + ".tmp")).exists()
    append(plog, batch(5, 1, 6), 1)
    plog.close()
    again = LeaderEpochFile.open(Log.open(tmp_path / "t-0"))
    assert again.cache.entries == [EpochEntry(0, 0), EpochEntry(5, 3), EpochEntry(6, 5)]
    assert again.end_offset_for(5, 6) == (5, 5)


def test_reopening_an_unchanged_log_rewrites_nothing(tmp_path: Path) -> None:
    """A restart opens every log: a cache that already matches its log (epoch 0 from offset 0,
    the log starting at 0) is neither marked dirty nor written again."""
    plog = Log.open(tmp_path / "t-0")
    epochs = LeaderEpochFile.open(plog)
    epochs.assign(0, 0)
    append(plog, batch(0, 1, 0), 1)
    plog.close()
    path = tmp_path / "t-0" / FILENAME
    before = path.stat().st_mtime_ns, path.stat().st_ino
    again = LeaderEpochFile.open(Log.open(tmp_path / "t-0"), write=False)
    assert not again.dirty
    again.assign(0, 1)  # the same leader and epoch after the restart: no change either
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == before
    assert again.cache.entries == [EpochEntry(0, 0)]


def test_missing_file_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    plog = Log.open(tmp_path / "t-0", segment_bytes=400)  # several segments
    append(plog, build_message_set([(None, b"old", 0)] * 2), 2)  # magic 1: no epoch
    for base, count, epoch in [(2, 2, 1), (4, 3, 1), (7, 1, 4), (8, 4, 4), (12, 2, 9)]:
        append(plog, batch(base, count, epoch), count)
    assert len(plog.segments) > 1
    epochs = LeaderEpochFile.open(plog)
    assert epochs.cache.entries == [EpochEntry(1, 2), EpochEntry(4, 7), EpochEntry(9, 12)]
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n3\n1 2\n4 7\n9 12\n"  # written: the scan runs once


@pytest.mark.parametrize("garbage", [b"0\n5\n1 2\n", b"\xff\xfe\x00junk", b"7\n1\n0 0\n"])
def test_corrupt_file_is_rebuilt_from_the_batches(tmp_path: Path, garbage: bytes) -> None:
    plog = Log.open(tmp_path / "t-0")
    append(plog, batch(0, 2, 3), 2)
    append(plog, batch(2, 2, 8), 2)
    (tmp_path / "t-0" / FILENAME).write_bytes(garbage)
    epochs = LeaderEpochFile.open(plog)
    assert epochs.cache.entries == [EpochEntry(3, 0), EpochEntry(8, 2)]
    assert parse((tmp_path / "t-0" / FILENAME).read_text()) == epochs.cache.entries


def test_entries_beyond_the_log_are_dropped_on_open(tmp_path: Path) -> None:
    # A crash after the checkpoint was written but before (or while) the log took the batch.
    plog = Log.open(tmp_path / "t-0")
    append(plog, batch(0, 4, 2), 4)
    (tmp_path / "t-0" / FILENAME).write_text(render([(2, 0), (3, 4), (5, 10)]))
    epochs = LeaderEpochFile.open(plog)
    assert epochs.cache.entries == [EpochEntry(2, 0)]
    assert parse((tmp_path / "t-0" / FILENAME).read_text()) == [EpochEntry(2, 0)]


def test_truncation_keeps_the_file_in_step(tmp_path: Path) -> None:
    plog = Log.open(tmp_path / "t-0")
    epochs = LeaderEpochFile.open(plog)
    for base, epoch in [(0, 1), (2, 2), (4, 3)]:
        data = batch(base, 2, epoch)
        append(plog, data, 2)
        epochs.assign_from(data)
    plog.truncate_to(2)
    epochs.truncate_from_end(plog.log_end_offset)
    assert epochs.cache.entries == [EpochEntry(1, 0)]
    assert parse((tmp_path / "t-0" / FILENAME).read_text()) == [EpochEntry(1, 0)]
    epochs.clear()
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n0\n"


def test_epoch_runs_reads_heads_only() -> None:
    data = batch(0, 2, 4) + batch(2, 1, 4) + build_message_set([(None, b"x", 0)], base_offset=3) + batch(4, 1, 6)
    runs, stop = epoch_runs(data)
    assert runs == [(4, 0), (6, 4)]
    assert stop == len(data)
    assert partition_leader_epoch(data, 0) == 4
    assert partition_leader_epoch(build_message_set([(None, b"x", 0)])) == -1
    # A head cut by the buffer's end is where reading stops; a body cut by it is skipped whole.
    cut = data[: len(batch(0, 2, 4)) + 10]
    assert epoch_runs(cut) == ([(4, 0)], len(batch(0, 2, 4)))
    runs, stop = epoch_runs(data[:30])
    assert runs == [(4, 0)] and stop == len(batch(0, 2, 4))


def test_an_unclean_open_takes_newer_epochs_from_the_recovered_batches(tmp_path: Path) -> None:
    """Kafka's LogSegment.recover: a crash after a new epoch's batches reached the log but before
    its entry reached the checkpoint (the entry is written later, off the event loop) leaves the
    file without it; the open after the crash recovers the last segment and assigns it from there."""
    plog = Log.open(tmp_path / "t-0")
    epochs = LeaderEpochFile.open(plog)
    epochs.assign(1, 0)
    append(plog, batch(0, 2, 1), 2)
    append(plog, batch(2, 3, 4), 3)  # epoch 4's batches, its entry not written yet
    append(plog, batch(5, 1, 4), 1)
    append(plog, batch(6, 2, 7), 2)
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n1\n1 0\n"
    plog.abandon()  # the crash: no clean-shutdown marker
    reopened = Log.open(tmp_path / "t-0")
    again = LeaderEpochFile.open(reopened)
    assert again.cache.entries == [EpochEntry(1, 0), EpochEntry(4, 2), EpochEntry(7, 6)]
    assert parse((tmp_path / "t-0" / FILENAME).read_text()) == again.cache.entries
    assert reopened.recovered_epochs is None  # read once
    assert again.end_offset_for(1, reopened.log_end_offset) == (1, 2)


def test_recovered_batches_of_older_epochs_leave_the_checkpoint_alone(tmp_path: Path) -> None:
    """Only epochs newer than the checkpoint's latest are taken, as Kafka's recovery does: the
    file's entries for the older ones stand (a truncated or compacted log's first batch of an epoch
    may lie after where the epoch started)."""
    plog = Log.open(tmp_path / "t-0")
    append(plog, batch(0, 2, 1), 2)
    append(plog, batch(2, 2, 3), 2)
    append(plog, batch(4, 2, 5), 2)
    (tmp_path / "t-0" / FILENAME).write_text(render([(1, 0), (3, 1), (5, 4)]))
    plog.abandon()
    again = LeaderEpochFile.open(Log.open(tmp_path / "t-0"))
    assert again.cache.entries == [EpochEntry(1, 0), EpochEntry(3, 1), EpochEntry(5, 4)]


def test_a_clean_open_recovers_nothing_and_reads_the_file_only(tmp_path: Path) -> None:
    plog = Log.open(tmp_path / "t-0")
    append(plog, batch(0, 2, 1), 2)
    append(plog, batch(2, 2, 4), 2)
    (tmp_path / "t-0" / FILENAME).write_text(render([(1, 0)]))
    plog.close()
    reopened = Log.open(tmp_path / "t-0")
    assert reopened.recovered_epochs is None
    assert LeaderEpochFile.open(reopened).cache.entries == [EpochEntry(1, 0)]


def deferred_file(tmp_path: Path, segment_bytes: int = 1 << 20) -> tuple[Log, LeaderEpochFile, DeferredSyncs]:
    """A log with a checkpoint on disk holding epoch 1 from offset 0 and two batches of it,
    opened as the replica manager opens it (writes batched on DeferredSyncs' threads)."""
    plog = Log.open(tmp_path / "t-0", segment_bytes=segment_bytes)
    syncs = DeferredSyncs()
    epochs = LeaderEpochFile.open(plog, syncs)
    epochs.assign(1, 0)
    append(plog, batch(0, 2, 1), 2)
    syncs.sync()
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n1\n1 0\n"
    return plog, epochs, syncs


def test_a_new_leaders_epoch_is_written_by_the_threads(tmp_path: Path) -> None:
    plog, epochs, syncs = deferred_file(tmp_path)
    epochs.assign(4, 2, later=True)  # become_leader: nothing written on the event loop
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n1\n1 0\n"
    assert syncs.pending(epochs)
    assert syncs.sync() == []
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n4 2\n"
    assert epochs.written and not epochs.in_flight and epochs.job is None


def test_a_crash_before_the_threads_wrote_the_epoch_loses_no_entry(tmp_path: Path) -> None:
    """The crash-safety argument of the module docstring, end to end: the new epoch's batches are
    in the last segment (no roll since the entry), which the open after a crash recovers."""
    plog, epochs, syncs = deferred_file(tmp_path)
    epochs.assign(4, 2, later=True)
    append(plog, batch(2, 3, 4), 3)
    plog.abandon()  # the crash, before the sync round
    again = LeaderEpochFile.open(Log.open(tmp_path / "t-0"))
    assert again.cache.entries == [EpochEntry(1, 0), EpochEntry(4, 2)]


def test_a_roll_writes_an_entry_still_due_first(tmp_path: Path) -> None:
    """Recovery re-reads only the last segment: before a new epoch's batches can leave it, the
    entry is renamed into place on the loop (its fsyncs stay deferred)."""
    size = len(batch(0, 2, 1))
    plog, epochs, syncs = deferred_file(tmp_path, segment_bytes=2 * size)
    epochs.assign(4, 2, later=True)
    append(plog, batch(2, 2, 4), 2)
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n1\n1 0\n"
    append(plog, batch(4, 2, 4), 2)  # rolls
    assert len(plog.segments) == 2
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n4 2\n"
    assert not syncs.pending(epochs)
    assert len(syncs) == 1  # its fsyncs, for the next round
    plog.abandon()
    again = LeaderEpochFile.open(Log.open(tmp_path / "t-0"))
    assert again.cache.entries == [EpochEntry(1, 0), EpochEntry(4, 2)]


def test_a_roll_takes_back_a_job_no_thread_started(tmp_path: Path) -> None:
    size = len(batch(0, 2, 1))
    plog, epochs, syncs = deferred_file(tmp_path, segment_bytes=2 * size)
    epochs.assign(4, 2, later=True)
    jobs = syncs.take()  # the round's jobs, handed to the threads but not started
    assert epochs.in_flight and epochs.job is jobs[0]
    epochs.assign(5, 2)  # a change meanwhile: queued behind the job in flight
    append(plog, batch(2, 2, 5), 2)
    append(plog, batch(4, 2, 5), 2)  # rolls: the loop claims the job and writes the current entries
    assert jobs[0].state == CLAIMED
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n5 2\n"
    (tmp_path / "t-0" / FILENAME).write_text("sentinel")
    assert DeferredSyncs.run(jobs) == []  # the claimed job writes nothing
    assert (tmp_path / "t-0" / FILENAME).read_text() == "sentinel"
    syncs.done([])
    assert epochs.written and not epochs.in_flight and not syncs.pending(epochs)


class SlowFsync:
    """os.fsync that holds a worker thread inside it until `release` (the loop's thread is never
    held: the test would stop there). A bound on the hold keeps a regression from hanging the
    run: it then shows as `released_early`."""

    def __init__(self, hold_s: float = 10.0) -> None:
        self.real = os.fsync
        self.hold_s = hold_s
        self.inside = threading.Event()
        self.gate = threading.Event()
        self.released_early = False
        self.loop_thread = threading.get_ident()

    def __call__(self, fd: int) -> None:
        if threading.get_ident() != self.loop_thread:
            self.inside.set()
            if not self.gate.wait(self.hold_s):
                self.released_early = True
        self.real(fd)

    def release(self) -> None:
        self.gate.set()


def _round_in_a_thread(jobs: list[Job]) -> tuple[threading.Thread, list[list[tuple[Path, OSError]]]]:
    out: list[list[tuple[Path, OSError]]] = []
    thread = threading.Thread(target=lambda: out.append(DeferredSyncs.run(jobs)))
    thread.start()
    return thread, out


def test_a_roll_does_not_wait_for_the_fsync_of_a_job_a_thread_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round's thread is inside the fsync of the file's new text when the log rolls: the loop
    stops the job before its rename and writes the entries itself, while the fsync still runs;
    the job's text never lands over them, and its temp file goes."""
    size = len(batch(0, 2, 1))
    plog, epochs, syncs = deferred_file(tmp_path, segment_bytes=2 * size)
    epochs.assign(4, 2, later=True)
    jobs = syncs.take()
    assert jobs[0].sync  # an existing file: its job fsyncs
    slow = SlowFsync()
    monkeypatch.setattr(leader_epoch_checkpoint.os, "fsync", slow)
    thread, failures = _round_in_a_thread(jobs)
    try:
        assert slow.inside.wait(10)
        assert jobs[0].state == RUNNING
        epochs.assign(5, 2)  # a change meanwhile, not a new leader's: written at once
        append(plog, batch(2, 2, 5), 2)
        append(plog, batch(4, 2, 5), 2)  # rolls
        assert len(plog.segments) == 2
        # Back on the loop while the thread is still inside its fsync.
        assert not slow.gate.is_set() and not slow.released_early
        assert jobs[0].state == SUPERSEDED
        assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n5 2\n"
    finally:
        slow.release()
        thread.join()
    assert failures == [[]] and not slow.released_early
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n5 2\n"  # not the job's "4 2"
    assert not [name for name in os.listdir(tmp_path / "t-0") if name.endswith(".tmp")]
    assert syncs.done([]) == []
    assert epochs.written and not epochs.in_flight and not syncs.pending(epochs)
    plog.abandon()
    assert LeaderEpochFile.open(Log.open(tmp_path / "t-0")).cache.entries == [EpochEntry(1, 0), EpochEntry(5, 2)]


def test_a_truncation_does_not_wait_for_the_fsync_of_a_job_a_thread_runs(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a follower's truncation (flush -> write_now): on disk at once, without
    waiting for the running job's fsync, and the job's stale text (with the cut epoch) never
    renamed over it, so a crash right after the round still reads the truncated entries."""
    plog, epochs, syncs = deferred_file(tmp_path)
    epochs.assign(7, 2, later=True)
    append(plog, batch(2, 2, 7), 2)
    jobs = syncs.take()
    slow = SlowFsync()
    monkeypatch.setattr(leader_epoch_checkpoint.os, "fsync", slow)
    thread, failures = _round_in_a_thread(jobs)
    try:
        assert slow.inside.wait(10)
        plog.truncate_to(2)
        epochs.truncate_from_end(2)
        assert not slow.gate.is_set() and not slow.released_early
        assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n1\n1 0\n"
    finally:
        slow.release()
        thread.join()
    assert failures == [[]] and not slow.released_early
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n1\n1 0\n"
    assert not [name for name in os.listdir(tmp_path / "t-0") if name.endswith(".tmp")]
    assert syncs.done([]) == []
    append(plog, batch(2, 2, 1), 2)
    plog.abandon()  # a crash
    assert LeaderEpochFile.open(Log.open(tmp_path / "t-0")).cache.entries == [EpochEntry(1, 0)]


def test_a_job_that_renamed_first_is_written_over(tmp_path: Path) -> None:
    """A job whose thread renamed its text before the loop's change: the loop's write lands after
    it (the job is DONE, nothing to stop), so the newer entries win."""
    plog, epochs, syncs = deferred_file(tmp_path)
    epochs.assign(4, 2, later=True)
    jobs = syncs.take()
    assert DeferredSyncs.run(jobs) == []  # the thread finished, the round not yet `done`
    assert jobs[0].state == DONE
    epochs.assign(6, 2)
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n6 2\n"
    assert syncs.done([]) == []
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n6 2\n"


def test_a_new_file_is_written_without_fsync_an_existing_one_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new partition's first file is not fsynced (a crash or power loss before it is on disk finds
    no file, and the open rebuilds it from the log); a rewrite of an existing one is, as Kafka's is."""
    syncs = DeferredSyncs()
    new = LeaderEpochFile.open(Log.open(tmp_path / "t-0"), syncs)
    new.assign(3, 0)  # a new partition's first epoch: written by the round
    plog, old, _ = deferred_file(tmp_path / "x")
    old.deferred = syncs
    old.assign(4, 2, later=True)
    fsyncs: list[int] = []
    real = os.fsync
    monkeypatch.setattr(leader_epoch_checkpoint.os, "fsync", lambda fd: (fsyncs.append(fd), real(fd)))
    jobs = syncs.take()
    assert [(job.path, job.sync) for job in jobs] == [(new.path, False), (old.path, True)]
    assert DeferredSyncs.run(jobs[:1]) == [] and fsyncs == []
    assert DeferredSyncs.run(jobs[1:]) == [] and len(fsyncs) == 2  # the file and its directory
    assert syncs.done([]) == []
    assert new.path.read_text() == "0\n1\n3 0\n" and new.written
    assert old.path.read_text() == "0\n2\n1 0\n4 2\n"


def test_a_change_during_the_round_is_written_at_once(tmp_path: Path) -> None:
    """A follower's fetch may append a new epoch while the round that writes its file has not
    started it: the loop takes the job back and writes the current entries at once (as any
    change of an existing file), and the round writes nothing over them."""
    plog, epochs, syncs = deferred_file(tmp_path)
    epochs.assign(4, 2, later=True)
    jobs = syncs.take()
    epochs.assign_from(batch(2, 1, 6))  # during the round
    assert jobs[0].state == CLAIMED and not syncs.pending(epochs)
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n6 2\n"
    assert DeferredSyncs.run(jobs) == []
    assert syncs.done([]) == []
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n2\n1 0\n6 2\n"
    assert epochs.written and not epochs.in_flight


def test_a_truncation_during_the_round_is_on_disk_before_a_crash(tmp_path: Path) -> None:
    """A follower cuts a divergent epoch while the round that writes its file (with that epoch)
    is in flight, then takes an older epoch's batches past the cut and crashes before the round
    ends. Recovery assigns only epochs newer than the file's latest, so a stale entry left on
    disk would survive the open: the truncation must be written at once."""
    plog, epochs, syncs = deferred_file(tmp_path)  # epoch 1 at 0, two batches
    epochs.assign(7, 2, later=True)  # a leader's epoch 7 from offset 2 ...
    append(plog, batch(2, 2, 7), 2)
    jobs = syncs.take()  # ... whose round is in flight
    plog.truncate_to(2)
    epochs.truncate_from_end(2)  # the follower cuts epoch 7's batches
    assert jobs[0].state == CLAIMED
    assert (tmp_path / "t-0" / FILENAME).read_text() == "0\n1\n1 0\n"
    append(plog, batch(2, 2, 1), 2)  # the new leader's older-epoch batches past the cut
    plog.abandon()  # the crash, before the round ends
    again = LeaderEpochFile.open(Log.open(tmp_path / "t-0"))
    assert again.cache.entries == [EpochEntry(1, 0)]
