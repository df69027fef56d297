"""RecordBatch v2 bytes as a leader stores them, built by kafka-python (the independent implementation)."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatchBuilder


def stamped_batch(base: int, count: int, epoch: int, timestamp: int = 1_700_000_000_000) -> bytes:
    """An uncompressed v2 batch of `count` records at `base`, stamped with partition leader epoch `epoch`
    (bytes 12-16, outside the CRC, as Kafka's leader writes it)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(count):
        b.append(i, timestamp=timestamp, key=None, value=b"v%d" % (base + i), headers=[])
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base)
    struct.pack_into(">i", buf, 12, epoch)
    return bytes(buf)
