"""Which pages of a file the page cache holds (mincore), and a tmp_path that can drop them."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest

PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_pages(path: Path) -> list[bool]:
    """Which pages of the file are in the page cache (mincore over a shared read-only mapping,
    which itself faults nothing in)."""
    size = path.stat().st_size
    pages = (size + PAGE - 1) // PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer(pages)
            assert _libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return [bool(b & 1) for b in vec.raw]
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def skip_unless_droppable(directory: Path) -> None:
    """Skip the test unless `directory`'s filesystem drops clean pages on request (tmpfs keeps them)."""
    probe = directory / "probe"
    probe.write_bytes(b"x" * 4 * PAGE)
    fd = os.open(probe, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if any(resident_pages(probe)):
        pytest.skip("this filesystem keeps clean pages cached on POSIX_FADV_DONTNEED (tmpfs)")
    probe.unlink()
