"""The log under I/O errors: an append is all or nothing, a failed log refuses further calls,
and recovery after a failed append keeps every entry written before it.

I/O errors are injected by wrapping `broker.log.segment._write_all` and `os.ftruncate` (mocks are
fine in a unit test of one module).
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.log import KafkaStorageError, Log
from broker.log import segment as segment_module
from broker.log.segment import RollbackFailed

INTERVAL = 100


def entry(offset: int, value: bytes) -> bytes:
    body = struct.pack(">bbq", 1, 0, 0) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def append(log: Log, value: bytes) -> int:
    off = log.log_end_offset
    log.append(entry(off, value), off)
    return off


def read_all(log: Log) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for seg in log.segments:
        data = seg.log_path.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            off, size = struct.unpack_from(">qi", data, pos)
            value_len = struct.unpack_from(">i", data, pos + 12 + 4 + 1 + 1 + 8 + 4)[0]
            start = pos + 12 + size - value_len
            out[off] = data[start:pos + 12 + size]
            pos += 12 + size
    return out


def crash(log: Log) -> None:
    """What a kill -9 leaves: fds gone, bytes in place, no clean-shutdown marker."""
    log._close_fds()


def failing_write(monkeypatch: pytest.MonkeyPatch, which: Callable[[int], bool], partial: bool = False) -> None:
    """The next `_write_all` on an fd chosen by `which` raises ENOSPC (after half the bytes, if `partial`)."""
    real = segment_module._write_all

    def write(fd: int, data: bytes | memoryview) -> None:
        if which(fd):
            if partial:
                os.write(fd, bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)
    monkeypatch.setattr(segment_module, "_write_all", write)


def sizes(log: Log) -> tuple[int, int]:
    seg = log.segments[-1]
    return os.fstat(seg.fd).st_size, len(seg.index_entries)


def failing_index_write(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """The next `_pwrite_all` into a file named `*suffix` raises ENOSPC (index files are written by
    short-lived opens at flush, roll and close; the fd tells the file through /proc)."""
    real = segment_module._pwrite_all

    def write(fd: int, data: bytes, position: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data, position)
    monkeypatch.setattr(segment_module, "_pwrite_all", write)


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_failed_index_write_fails_the_log_and_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            suffix: str) -> None:
    """Appends keep index points in memory; the flush that writes them meets ENOSPC: the log fails
    (nothing more is taken), and recovery after a restart finds every entry appended before."""
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=INTERVAL)
    kept = {append(log, b"a%d" % i * 40): b"a%d" % i * 40 for i in range(8)}  # several index points
    assert log.segments[-1].index_entries
    failing_index_write(monkeypatch, suffix)
    with pytest.raises(KafkaStorageError) as err:
        log.flush()
    assert err.value.operation == "flush" and err.value.error.errno == errno.ENOSPC
    assert str(err.value.error.filename).endswith(suffix)
    # A failed log takes nothing more, even once the disk has room again.
    monkeypatch.undo()
    with pytest.raises(KafkaStorageError):
        append(log, b"later")
    assert log.failed is not None

    crash(log)
    reopened = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=INTERVAL)
    assert reopened.log_end_offset == 8
    assert read_all(reopened) == kept
    assert append(reopened, b"after") == 8
    assert read_all(reopened) == kept | {8: b"after"}


@pytest.mark.parametrize("partial", [False, True])
def test_failed_log_write_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partial: bool) -> None:
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=INTERVAL)
    kept = {append(log, b"x" * 30): b"x" * 30 for _ in range(3)}
    before = (log.log_end_offset, log.size_bytes, sizes(log))
    log_fd = log.segments[-1].fd
    failing_write(monkeypatch, lambda fd: fd == log_fd, partial)
    with pytest.raises(KafkaStorageError):
        append(log, b"doomed" * 20)
    assert (log.log_end_offset, log.size_bytes, sizes(log)) == before
    monkeypatch.undo()
    crash(log)
    assert read_all(Log.open(tmp_path, index_interval_bytes=INTERVAL)) == kept


def test_rollback_that_fails_leaves_a_torn_tail_recovery_cuts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=INTERVAL)
    kept = {append(log, b"k%d" % i * 30): b"k%d" % i * 30 for i in range(4)}
    log_fd = log.segments[-1].fd
    failing_write(monkeypatch, lambda fd: fd == log_fd, partial=True)

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(segment_module.os, "ftruncate", no_truncate)
    with pytest.raises(KafkaStorageError) as err:
        append(log, b"torn" * 50)
    assert isinstance(err.value.error, RollbackFailed)
    assert log.log_end_offset == 4
    monkeypatch.undo()
    crash(log)
    reopened = Log.open(tmp_path, index_interval_bytes=INTERVAL)
    # Recovery keeps every whole entry up to the last valid one and cuts the torn bytes after it.
    assert reopened.log_end_offset == 4
    assert read_all(reopened) == kept


def test_failed_roll_leaves_no_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.open(tmp_path, segment_bytes=200, index_interval_bytes=INTERVAL)
    kept = {append(log, b"r" * 100): b"r" * 100}
    real_open = os.open

    def open_(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(".index"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, mode)
    monkeypatch.setattr(segment_module.os, "open", open_)
    with pytest.raises(KafkaStorageError):
        append(log, b"r" * 150)  # does not fit: rolls first
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".log") == [f"{0:020d}.log"]
    crash(log)
    reopened = Log.open(tmp_path, segment_bytes=200, index_interval_bytes=INTERVAL)
    assert reopened.log_end_offset == 1 and read_all(reopened) == kept


def test_io_error_on_read_and_flush_is_a_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.open(tmp_path, index_interval_bytes=INTERVAL)
    for _ in range(3):
        append(log, b"f" * 20)

    def eio(*args: object) -> None:
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(segment_module.os, "fsync", eio)
    with pytest.raises(KafkaStorageError) as err:
        log.flush()
    assert err.value.operation == "flush"
    with pytest.raises(KafkaStorageError):
        log.read(0, 1000)
    # Closing a failed log writes no clean-shutdown marker: the next open validates the files.
    monkeypatch.undo()
    log.close()
    assert not (tmp_path / ".clean_shutdown").exists()


def test_open_on_an_unwritable_dir_is_a_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def eperm(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(Path, "mkdir", eperm)
    with pytest.raises(KafkaStorageError) as err:
        Log.open(tmp_path / "t-0")
    assert err.value.operation == "open"


def test_recovery_after_unclean_stop_keeps_every_entry(tmp_path: Path) -> None:
    log = Log.open(tmp_path, segment_bytes=600, index_interval_bytes=INTERVAL)
    kept = {}
    for i in range(40):
        v = b"e%d" % i * 10
        kept[append(log, v)] = v
    assert len(log.segments) > 1
    crash(log)
    reopened = Log.open(tmp_path, segment_bytes=600, index_interval_bytes=INTERVAL)
    assert reopened.log_end_offset == 40
    assert read_all(reopened) == kept
