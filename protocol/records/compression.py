"""Message compression: gzip, snappy (raw or xerial-framed) and LZ4 (KAFKA-3160's two framings).

Java clients and librdkafka frame snappy the xerial way (snappy-java's stream format); some
clients send raw snappy. Both are read; xerial is written, as Kafka's own producer does.
Magic-0 LZ4 carries a frame-header checksum computed over the wrong bytes (KAFKA-3160); it is
repaired before decoding, and magic-0 output is written with the same quirk so that old
readers accept it.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame

from protocol.errors import ErrorCode
from protocol.records.errors import RecordsError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def compress(codec: int, data: bytes, magic: int = 1) -> bytes:
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == SNAPPY:
        out = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i:i + _XERIAL_BLOCK]))
            out.append(struct.pack(">i", len(block)))
            out.append(block)
        return b"".join(out)
    if codec == LZ4:
        frame = lz4.frame.compress(data, block_linked=False, content_checksum=False)
        return _break_header_checksum(frame) if magic == 0 else frame
    raise RecordsError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"cannot compress with codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == GZIP:
            return gzip.decompress(data)
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == LZ4:
            return _lz4_decompress(bytes(data))
    except RecordsError:
        raise
    except (OSError, EOFError, ValueError, RuntimeError, zlib.error, struct.error) as e:
        raise RecordsError.corrupt(f"cannot decompress {NAMES.get(codec, codec)}: {e}") from e
    if codec == ZSTD:
        raise RecordsError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, "zstd needs message format v2")
    raise RecordsError.corrupt(f"unknown compression codec {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    pos, out = 16, []
    while pos < len(data):
        if pos + 4 > len(data):
            raise RecordsError.corrupt("truncated xerial snappy block header")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise RecordsError.corrupt("truncated xerial snappy block")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos:pos + n])))
        pos += n
    return b"".join(out)


# ---- LZ4 frame header checksum (xxHash32 of the frame descriptor, second byte) ----------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32, only ever applied to a few header bytes, so plain Python is fine."""
    n, i = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i + 16 <= n:
            for k in range(4):
                (lane,) = struct.unpack_from("<I", data, i)
                v[k] = (_rotl((v[k] + lane * _P2) & _M, 13) * _P1) & _M
                i += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + lane * _P3) & _M, 17) * _P4) & _M
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M, 11) * _P1) & _M
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h


def _descriptor_end(frame: bytes) -> int:
    flg = frame[4]
    return 4 + 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)


def _break_header_checksum(frame: bytes) -> bytes:
    end = _descriptor_end(frame)
    hc = (xxh32(frame[0:end]) >> 8) & 0xFF  # KAFKA-3160: the magic number was hashed too
    return frame[:end] + bytes([hc]) + frame[end + 1:]


def _lz4_decompress(data: bytes) -> bytes:
    if not data.startswith(_LZ4_MAGIC) or len(data) < 7:
        raise RecordsError.corrupt("not an LZ4 frame")
    end = _descriptor_end(data)
    good = (xxh32(data[4:end]) >> 8) & 0xFF
    if data[end] != good:
        data = data[:end] + bytes([good]) + data[end + 1:]
    out: bytes = lz4.frame.decompress(data)  # lz4 ships no type hints
    return out
