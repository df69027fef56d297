"""Message compression: gzip, snappy (raw or xerial-framed), LZ4 (KAFKA-3160's two framings), zstd.

Java clients and librdkafka frame snappy the xerial way (snappy-java's stream format); some
clients send raw snappy. Both are read; xerial is written, as Kafka's own producer does.
Magic-0 LZ4 carries a frame-header checksum computed over the wrong bytes (KAFKA-3160); it is
repaired before decoding, and magic-0 output is written with the same quirk so that old
readers accept it.

Decompression is bounded, because a few hundred KB of gzip can inflate to gigabytes (a
"bomb"). `decompress(codec, data, max_size)` asks zlib and LZ4 for at most `max_size + 1`
bytes of output (they stop there, their buffers grown in blocks as the output comes), and
answers MESSAGE_TOO_LARGE when that much came out, so a bomb costs at most its bound. Snappy blocks state their uncompressed length up front, which is
checked before the block is inflated; zstd is read through a stream reader in blocks up to the
bound (a zstd frame need not state its size). zstd exists in RecordBatch v2 only. The bound the broker passes is `inflated_limit(limit)`:
`MAX_INFLATION` times the message size limit (`message.max.bytes` / `max.message.bytes`, which
Kafka applies to the compressed wrapper), and never below `MIN_INFLATED_LIMIT`. Kafka bounds
only the wrapper; the inner set's bound is this project's, chosen well above what producers
compress (their batches are at most a few MB uncompressed, at ratios of 2-20).
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from protocol.errors import ErrorCode
from protocol.records.errors import RecordsError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"

MAX_INFLATION = 64
MIN_INFLATED_LIMIT = 64 << 20
_LZ4_STEP = 4 << 20


def inflated_limit(max_message_bytes: int) -> int:
    """The most a compressed wrapper's inner records may inflate to, given the message size limit."""
    return max(MAX_INFLATION * max_message_bytes, MIN_INFLATED_LIMIT)


def _too_large(codec: int, max_size: int) -> RecordsError:
    return RecordsError(ErrorCode.MESSAGE_TOO_LARGE,
                        f"{NAMES.get(codec, codec)} data inflates beyond {max_size} bytes")


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
    if codec == ZSTD and magic >= 2:
        return bytes(zstandard.ZstdCompressor(level=3).compress(data))
    raise RecordsError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"cannot compress with codec {codec}")


def decompress(codec: int, data: bytes | memoryview, max_size: int | None = None) -> bytes:
    """The inflated data; MESSAGE_TOO_LARGE once it would exceed max_size (None: unbounded)."""
    limit = -1 if max_size is None else max_size
    try:
        if codec == GZIP:
            return _gzip_decompress(data, limit)
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data), limit)
        if codec == LZ4:
            return _lz4_decompress(bytes(data), limit)
        if codec == ZSTD:
            return _zstd_decompress(data, limit)
    except RecordsError:
        raise
    except (OSError, EOFError, ValueError, RuntimeError, zlib.error, struct.error, cramjam.DecompressionError,
            zstandard.ZstdError) as e:
        raise RecordsError.corrupt(f"cannot decompress {NAMES.get(codec, codec)}: {e}") from e
    raise RecordsError.corrupt(f"unknown compression codec {codec}")


def _gzip_decompress(data: bytes | memoryview, limit: int) -> bytes:
    """Every gzip member of data (a producer may concatenate them), inflated to at most limit + 1
    bytes: zlib stops there (its output buffer grows in blocks up to that size), so a bomb
    costs its bound, not its inflated size."""
    pieces: list[bytes] = []
    total = 0
    rest: bytes | memoryview = data
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        piece = d.decompress(rest, 0 if limit < 0 else limit + 1 - total)
        total += len(piece)
        if 0 <= limit < total:
            raise _too_large(GZIP, limit)
        if not d.eof:
            raise RecordsError.corrupt("cannot decompress gzip: truncated stream")
        pieces.append(piece)
        rest = d.unused_data
        if not rest.strip(b"\x00"):  # trailing zero padding ends the data, as gzip.decompress allows
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)


_ZSTD_STEP = 1 << 20


def _zstd_decompress(data: bytes | memoryview, limit: int) -> bytes:
    """Every zstd frame of data, read in blocks and stopped once more than limit bytes came out.

    A frame cut short ends the output quietly; the batch's record count then finds the records
    missing (INVALID_RECORD), and the batch CRC covers the compressed bytes anyway."""
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    pieces: list[bytes] = []
    total = 0
    while True:
        piece = reader.read(_ZSTD_STEP)
        if not piece:
            return b"".join(pieces)
        total += len(piece)
        if 0 <= limit < total:
            raise _too_large(ZSTD, limit)
        pieces.append(piece)


def _snappy_length(block: bytes | memoryview, limit: int) -> None:
    """Refuse a raw snappy block whose stated length (its leading varint) exceeds limit."""
    n = shift = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    if 0 <= limit < n:
        raise _too_large(SNAPPY, limit)


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        _snappy_length(data, limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    pos, out, total = 16, [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise RecordsError.corrupt("truncated xerial snappy block header")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise RecordsError.corrupt("truncated xerial snappy block")
        block = data[pos:pos + n]
        _snappy_length(block, -1 if limit < 0 else limit - total)
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        total += len(out[-1])
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


def _lz4_decompress(data: bytes, limit: int) -> bytes:
    if not data.startswith(_LZ4_MAGIC) or len(data) < 7:
        raise RecordsError.corrupt("not an LZ4 frame")
    end = _descriptor_end(data)
    good = (xxh32(data[4:end]) >> 8) & 0xFF
    if data[end] != good:
        data = data[:end] + bytes([good]) + data[end + 1:]
    d = lz4.frame.LZ4FrameDecompressor()
    if limit < 0:
        out: bytes = d.decompress(data)  # lz4 ships no type hints
    else:
        # python-lz4 allocates max_length up front, so the output is asked for a step at a time.
        pieces = [d.decompress(data, max_length=min(limit + 1, _LZ4_STEP))]
        total = len(pieces[0])
        while total <= limit and not d.eof and not d.needs_input:
            pieces.append(d.decompress(b"", max_length=min(limit + 1 - total, _LZ4_STEP)))
            total += len(pieces[-1])
        if total > limit:
            raise _too_large(LZ4, limit)
        out = pieces[0] if len(pieces) == 1 else b"".join(pieces)
    if not d.eof:
        raise RecordsError.corrupt("cannot decompress lz4: truncated frame")
    return out
