"""Which partition a written row goes to when it does not say: Kafka's default partitioner.

Keyed rows use murmur2 of the key, positive, modulo the partition count: the formula of the
Java producer's default partitioner (and librdkafka's `murmur2_random`), so a key lands on
the same partition whether Spark or another Kafka client wrote it. Rows without a key are
spread round-robin.
"""

from __future__ import annotations

import struct

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit MurmurHash2 with Kafka's seed, as an unsigned int (Kafka works on its int32 bits)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's `toPositive(murmur2(key)) % partitions`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class RoundRobin:
    """Next partition for a keyless row; each writer task starts at a different partition."""

    def __init__(self, start: int) -> None:
        self._next = start

    def choose(self, partitions: int) -> int:
        p = self._next % partitions
        self._next += 1
        return p
