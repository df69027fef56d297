"""The messages the client-compatibility tests write with each client and read back."""

from __future__ import annotations

N_MESSAGES = 10_000


def expected_messages(tag: str, n: int = N_MESSAGES) -> list[tuple[bytes, bytes]]:
    """Keyed values of varied size, so compression and offset assignment are exercised for real.

    Printable, tab- and newline-free, so kcat's line-oriented input and output carry them unchanged.
    """
    return [(f"{tag}-key-{i % 97}".encode(), f"{tag}-value-{i}-".encode() + b"x" * (i % 50)) for i in range(n)]


def read_back_with_kafka_python(bootstrap: str, topic: str, n: int = N_MESSAGES,
                                seek_to: int | None = None) -> tuple[list[tuple[int, bytes, bytes]], list]:
    """assign + seek_to_beginning, every message of partition 0; then optionally seek and poll once."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      consumer_timeout_ms=10_000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        for m in c:
            got.append((m.offset, m.key, m.value))
            if len(got) == n:
                break
        tail = []
        if seek_to is not None:
            c.seek(tp, seek_to)
            tail = [(m.offset, m.key, m.value) for _, batch in c.poll(10_000).items() for m in batch]
        return got, tail
    finally:
        c.close()
