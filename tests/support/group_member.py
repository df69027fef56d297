"""One confluent-kafka group member as its own process, for tests that kill it (`kill -9`).

    python -m tests.support.group_member BOOTSTRAP TOPIC GROUP [PAUSE_S]

Subscribes from the earliest offset, and after each batch prints its messages as
`R partition offset value` lines, commits synchronously and prints `C partition offset` for
every partition the coordinator confirmed (the next offset to read). Flushes after each batch,
so whatever a killed member printed is what it had done. SIGTERM: close (commit, leave) and exit.
"""

from __future__ import annotations

import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException


def main(bootstrap: str, topic: str, group: str, pause_s: float) -> None:
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    c.subscribe([topic])
    out = sys.stdout
    try:
        while not stopping:
            msgs = [m for m in c.consume(100, 0.5) if not m.error()]
            if not msgs:
                continue
            out.write("".join(f"R {m.partition()} {m.offset()} {int(m.value())}\n" for m in msgs))
            out.flush()
            time.sleep(pause_s)
            try:
                done = c.commit(asynchronous=False) or []
            except KafkaException:
                continue  # a rebalance took the partitions: these reads stay uncommitted
            out.write("".join(f"C {p.partition} {p.offset}\n" for p in done if p.error is None and p.offset >= 0))
            out.flush()
    finally:
        c.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
