"""How large a topic's assignment znode (`/brokers/topics/<t>`) would be, computed before it exists.

ZooKeeper refuses a write larger than its `jute.maxbuffer` (1 MiB by default, path and packet
header included), and a client that sends one loses its session. So a partition count whose
assignment cannot be stored is refused (broker.apis.admin answers INVALID_PARTITIONS with the
reason given here) before any assignment is built:
the size of `{"version":1,"partitions":{"0":[1,2],...}}` follows from the partition numbers'
digits (summed in closed form, never per partition) and the replica ids' digits. For an
assignment the broker chooses, every replica id is counted at the width of the widest live
broker id, an upper bound. Kafka 2.8 (ZooKeeper mode) has no such check and fails in the
ZooKeeper client; KRaft Kafka caps partitions per request with POLICY_VIOLATION.
"""

from __future__ import annotations

from collections.abc import Iterable

JUTE_MAXBUFFER = 0xFFFFF  # ZooKeeper's default jute.maxbuffer
ZNODE_MAX_BYTES = JUTE_MAXBUFFER - 1024  # room for the request header and a 249-character path
_HEAD = len('{"version":1,"partitions":{') + len("}}")
_MIN_ENTRY = len('"0":[0],')  # the smallest a partition's entry can be, its comma included


def digits_sum(start: int, stop: int) -> int:
    """Total decimal digits of the integers in [start, stop), by digit-width bands."""
    total, width, low = 0, 1, 0
    while low < stop:
        high = 10 ** width
        lo, hi = max(start, low), min(stop, high)
        if lo < hi:
            total += (hi - lo) * width
        low, width = high, width + 1
    return total


def entries_size(start: int, count: int, replication_factor: int, id_width: int) -> int:
    """Bytes of `count` entries `"p":[b,...]` numbered from `start`, with a comma each."""
    per_partition = len('"":[],') + replication_factor * id_width + (replication_factor - 1)
    return digits_sum(start, start + count) + count * per_partition


def chosen_too_large(topic: str, start: int, count: int, replication_factor: int, brokers: Iterable[int],
                     existing_bytes: int = 0) -> str | None:
    """Why `count` new partitions from `start` that the broker would assign cannot be stored, or None.

    `existing_bytes` is the size of the topic's assignment znode as it stands (0 for a new topic).
    """
    width = max((len(str(b)) for b in brokers), default=1)
    base = existing_bytes or _HEAD
    if count > (ZNODE_MAX_BYTES - base) // _MIN_ENTRY + 1:  # obviously too many: no arithmetic on huge counts
        return _why(topic, start + count, None)
    size = base + entries_size(start, count, replication_factor, width)
    return _why(topic, start + count, size) if size > ZNODE_MAX_BYTES else None


def given_too_large(topic: str, start: int, assignments: list[list[int]], existing_bytes: int = 0) -> str | None:
    """Why explicit replica assignments for partitions from `start` cannot be stored, or None."""
    base = existing_bytes or _HEAD
    if len(assignments) > (ZNODE_MAX_BYTES - base) // _MIN_ENTRY + 1:
        return _why(topic, start + len(assignments), None)
    size = base + digits_sum(start, start + len(assignments))
    for replicas in assignments:
        size += len('"":[],') + sum(len(str(b)) for b in replicas) + max(len(replicas) - 1, 0)
    return _why(topic, start + len(assignments), size) if size > ZNODE_MAX_BYTES else None


def _why(topic: str, partitions: int, size: int | None) -> str:
    what = f"{size} bytes" if size is not None else "more"
    return (f"The assignment of {partitions} partitions for topic '{topic}' would take {what}, "
            f"more than ZooKeeper stores in one znode ({ZNODE_MAX_BYTES} bytes).")
