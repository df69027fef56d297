"""broker/log over RecordBatch v2 and mixed-magic segments: reads, truncation and recovery find a
batch by its last offset (baseOffset + lastOffsetDelta), as they find a magic-1 wrapper by its offset."""

from __future__ import annotations

import os
from pathlib import Path

from broker.log import Log
from broker.log.log import CLEAN_SHUTDOWN
from protocol.records import compression, record_batch
from protocol.records.message_set import build_message_set
from protocol.records.records import decode_records


def batch(base: int, n: int, codec: int = compression.NONE, value: bytes = b"v") -> bytes:
    return record_batch.build_batch([(1000 + i, b"k%d" % (base + i), value, [("h", b"x")]) for i in range(n)],
                                    base_offset=base, codec=codec)


def legacy(base: int, n: int) -> bytes:
    return build_message_set([(b"k%d" % (base + i), b"v", 1000 + i) for i in range(n)], magic=1, base_offset=base)


def fill(log: Log) -> list[int]:
    """magic-1 entries 0..4, then batches 5..14 (gzip), 15..17, 18..37 (big): the log a release upgrade leaves."""
    log.append(legacy(0, 5), 4)
    log.append(batch(5, 10, compression.GZIP), 14)
    log.append(batch(15, 3), 17)
    log.append(batch(18, 20, value=b"x" * 300), 37)
    return list(range(38))


def offsets(data: bytes) -> list[int]:
    return [r.offset for r in decode_records(data)]


def test_reads_start_at_the_batch_holding_the_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path, index_interval_bytes=64)
    assert fill(log) == offsets(log.read(0, 1 << 20).read_bytes())
    assert log.log_end_offset == 38
    # An offset inside a batch gets the whole batch (readers skip what is below their offset).
    assert offsets(log.read(7, 1 << 20).read_bytes())[:3] == [5, 6, 7]
    assert offsets(log.read(17, 1 << 20).read_bytes())[0] == 15
    assert offsets(log.read(3, 1 << 20).read_bytes())[0] == 3
    # A high watermark inside the log bounds the slice before the batch holding it.
    assert offsets(log.read(0, 1 << 20, max_offset=15).read_bytes()) == list(range(15))
    log.close()


def test_truncation_drops_a_straddling_batch_whole(tmp_path: Path) -> None:
    log = Log.open(tmp_path, index_interval_bytes=64)
    fill(log)
    log.truncate_to(20)
    assert log.log_end_offset == 18  # the batch 18..37 goes whole
    log.truncate_to(10)
    assert log.log_end_offset == 5
    assert offsets(log.read(0, 1 << 20).read_bytes()) == list(range(5))
    log.append(batch(5, 2), 6)
    assert log.log_end_offset == 7
    log.close()


def test_clean_and_unclean_reopen_of_a_mixed_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path, index_interval_bytes=64)
    want = fill(log)
    log.close()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()
    log = Log.open(tmp_path, index_interval_bytes=64)  # index trusted
    assert log.log_end_offset == 38 and offsets(log.read(0, 1 << 20).read_bytes()) == want
    log.abandon()
    (tmp_path / CLEAN_SHUTDOWN).unlink(missing_ok=True)
    (tmp_path / f"{0:020d}.index").unlink()
    log = Log.open(tmp_path, index_interval_bytes=64)  # full scan of both magics, index rebuilt
    assert log.log_end_offset == 38 and offsets(log.read(0, 1 << 20).read_bytes()) == want
    assert offsets(log.read(16, 1 << 20).read_bytes())[0] == 15
    log.close()


def test_recovery_cuts_at_a_torn_or_corrupt_batch(tmp_path: Path) -> None:
    log = Log.open(tmp_path)
    fill(log)
    log.abandon()
    seg = tmp_path / f"{0:020d}.log"
    size = seg.stat().st_size
    os.truncate(seg, size - 7)  # torn last batch
    log = Log.open(tmp_path)
    assert log.log_end_offset == 18
    log.abandon()
    raw = bytearray(seg.read_bytes())
    raw[-1] ^= 1  # the CRC32C of batch 15..17 no longer holds
    seg.write_bytes(bytes(raw))
    log = Log.open(tmp_path)
    assert log.log_end_offset == 15
    assert offsets(log.read(0, 1 << 20).read_bytes()) == list(range(15))
    log.close()
