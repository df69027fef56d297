"""glibc malloc settings for a broker that receives megabyte request frames.

Each request frame is received into a buffer of its own (broker.network.RequestReader): about a
megabyte for a Produce request of 10,000 100-byte records. glibc serves an allocation that large
with a fresh mmap, or from the top of its heap, which it gives back to the kernel (trims) once it
is freed; either way the next frame's buffer is new memory, whose pages the kernel zeroes and
maps on first touch. Under bench.produce_load those page faults and the zeroing took 10-15% of
the broker's CPU (perf). A fixed mmap threshold (32 MiB) and trim threshold (64 MiB) keep freed
frame buffers in the heap for the next frames: at most 64 MiB of freed memory stays mapped.
Only glibc has mallopt; elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest dynamic threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 64 << 20


def keep_freed_buffers() -> bool:
    """Set the thresholds; False where there is no glibc mallopt (or it refuses)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
