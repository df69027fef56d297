"""broker.log.cleaner.cleaner over a real Log on disk: a pass keeps the latest record per key at its
offset, swaps atomically, and a crash at each step leaves a log that opens with nothing latest lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.log import Log
from broker.log.cleaner import cleaner as cleaner_module
from broker.log.cleaner.batches import OffsetMap
from broker.log.cleaner.cleaner import CleanerStats, clean_log, segment_stats
from broker.log.cleaner.rules import CompactionConfig, cleanable_offsets
from broker.log.cleaner.throttle import CleanerThrottle
from broker.log.segment import Segment
from protocol.records import compression, record_batch
from protocol.records.records import decode_records

NOW = 1_700_000_000_000
CONFIG = CompactionConfig(compact=True, segment_bytes=64 * 1024)


def fill(log: Log, n: int, keys: int, tombstone_every: int = 0) -> dict[bytes, tuple[int, bytes | None]]:
    """n records over `keys` keys, five per batch; returns each key's latest (offset, value)."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    offset = log.log_end_offset
    while offset < n:
        recs = []
        for i in range(5):
            o = offset + i
            key = b"key-%d" % (o * 7 % keys)
            value = None if tombstone_every and o % tombstone_every == 0 else b"value-%d" % o
            recs.append((NOW + o, key, value, ()))
            latest[key] = (o, value)
        codec = compression.GZIP if offset % 3 == 0 else compression.NONE
        log.append(record_batch.build_batch(recs, base_offset=offset, codec=codec), offset + 4)
        offset += 5
    return latest


def everything(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        if not data:
            break
        recs = decode_records(data)
        out.extend((r.offset, r.key, r.value) for r in recs if r.offset >= offset)
        offset = max(r.offset for r in recs) + 1 if recs else offset + 1
    return out


def run_pass(log: Log, retired: list[list[Segment]] | None = None, checkpoint: int | None = None) -> int:
    c = cleanable_offsets(segment_stats(log), log.log_start_offset, log.log_end_offset, log.log_end_offset,
                          checkpoint, NOW, CONFIG)
    throttle = CleanerThrottle(1e308, lambda: 0.0)
    keep = retired if retired is not None else []
    return asyncio.run(clean_log(log, c, CONFIG, OffsetMap(1 << 20), frozenset(), throttle, CleanerStats(),
                                 keep.append))


def latest_values(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for o, k, v in records:
        assert k is not None
        out[k] = (o, v)
    return out


def test_a_pass_keeps_exactly_the_latest_record_per_key_at_its_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=16 * 1024, index_interval_bytes=512)
    latest = fill(log, 3000, 100, tombstone_every=13)
    before_end = log.log_end_offset
    before = everything(log)
    end = run_pass(log)
    active_base = log.segments[-1].base_offset
    assert end == active_base
    after = everything(log)
    assert log.log_end_offset == before_end
    # Below the active segment: one record per key, the latest, tombstones kept (nothing clean yet).
    cleaned = [r for r in after if r[0] < active_base]
    assert len({k for _, k, _ in cleaned}) == len(cleaned)
    expected = {k: ov for k, ov in latest_values([r for r in before if r[0] < active_base]).items()}
    assert latest_values(cleaned) == expected
    # The active segment is untouched, and every key's latest record is still there.
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    assert latest_values(after) == latest
    # Reads at every original offset work (a gap moves to the next record) and the log reopens the same.
    for o in range(0, before_end, 97):
        data = log.read(o, 4096).read_bytes()
        assert data and max(r.offset for r in decode_records(data)) >= o
    log.close()
    again = Log.open(tmp_path, segment_bytes=16 * 1024, index_interval_bytes=512)
    assert everything(again) == after and again.log_end_offset == before_end
    again.close()


def test_tombstones_go_on_a_later_pass_past_delete_retention(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=16 * 1024, index_interval_bytes=512)
    fill(log, 2000, 50, tombstone_every=7)
    first_end = run_pass(log)
    assert any(v is None for o, _, v in everything(log) if o < first_end)
    fill(log, 4000, 50)  # newer values for every key, and more segments
    global CONFIG
    saved = CONFIG
    CONFIG = CompactionConfig(compact=True, segment_bytes=64 * 1024, delete_retention_ms=-10_000)
    try:
        run_pass(log, checkpoint=first_end)
    finally:
        CONFIG = saved
    active_base = log.segments[-1].base_offset
    assert all(v is not None for o, _, v in everything(log) if o < first_end)
    assert len({k for o, k, _ in everything(log) if o < active_base}) == len(
        [1 for o, _, _ in everything(log) if o < active_base])
    log.close()


def test_slices_of_replaced_segments_stay_readable_until_deleted(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=16 * 1024, index_interval_bytes=512)
    fill(log, 2000, 20)
    held = log.read(0, 4096)
    before = held.read_bytes()
    retired: list[list[Segment]] = []
    run_pass(log, retired)
    assert retired and held.read_bytes() == before  # the old fd still reads the old bytes
    assert list(tmp_path.glob("*.deleted"))
    assert log.pending_deletes == sum(len(segs) for segs in retired)
    for segs in retired:
        log.finish_delete(segs)
    assert not list(tmp_path.glob("*.deleted"))
    log.close()


class Crash(BaseException):
    pass


@pytest.mark.parametrize("point", ["cleaning", "cleaned", "swapped", "replacing"])
def test_a_crash_at_each_step_leaves_a_log_that_opens_whole(tmp_path: Path, point: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.open(tmp_path, segment_bytes=16 * 1024, index_interval_bytes=512)
    latest = fill(log, 3000, 100)
    before = everything(log)
    end_offset = log.log_end_offset

    def crash(name: str) -> None:
        if name == point:
            raise Crash(name)

    monkeypatch.setattr(cleaner_module, "kill_point", crash)
    with pytest.raises(Crash):
        run_pass(log)
    log.abandon()  # as kill -9: no flush, no marker
    names = {p.name.split(".", 1)[1] for p in tmp_path.iterdir() if "." in p.name}
    if point != "cleaning":
        assert any(n.endswith((".cleaned", ".swap")) for n in names)
    reopened = Log.open(tmp_path, segment_bytes=16 * 1024, index_interval_bytes=512)
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
    after = everything(reopened)
    assert reopened.log_end_offset == end_offset
    assert latest_values(after) == latest
    if point in ("swapped", "replacing"):
        assert len(after) < len(before)  # the swap completed at open
    else:
        assert after == before  # the cleaned copy was discarded
    # Cleaning resumes: a new pass over the reopened log completes.
    monkeypatch.setattr(cleaner_module, "kill_point", lambda name: None)
    run_pass(reopened)
    assert latest_values(everything(reopened)) == latest
    reopened.close()


class TruncatingThrottle(CleanerThrottle):
    """Truncates the log at its first step, as a follower's epoch truncation would mid-pass."""

    def __init__(self, log: Log, offset: int) -> None:
        super().__init__(1e308, lambda: 0.0)
        self.log, self.offset, self.done = log, offset, False

    async def take(self, nbytes: int) -> None:
        if not self.done:
            self.done = True
            self.log.truncate_to(self.offset)
        await super().take(nbytes)


def test_a_truncation_during_a_pass_abandons_it(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=16 * 1024, index_interval_bytes=512)
    fill(log, 3000, 100)
    cut = log.segments[3].base_offset + 2
    c = cleanable_offsets(segment_stats(log), 0, log.log_end_offset, log.log_end_offset, None, NOW, CONFIG)
    with pytest.raises(cleaner_module.CleaningAborted):
        asyncio.run(clean_log(log, c, CONFIG, OffsetMap(1 << 20), frozenset(), TruncatingThrottle(log, cut),
                              CleanerStats(), lambda segs: None))
    assert not list(tmp_path.glob("*.cleaned")) and not list(tmp_path.glob("*.swap"))
    records = everything(log)
    assert [o for o, _, _ in records] == list(range(log.log_end_offset))  # nothing dropped below the cut
    log.close()
