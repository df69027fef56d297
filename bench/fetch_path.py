"""CPU per request of the leader's follower-fetch path, in one process: decode, handle
(broker.apis.fetch) and encode of a Fetch v3 follower request naming 18 partitions (one with an
append before every fetch, 17 idle, as a leader of one busy partition and its third of
__consumer_offsets sees them), on a standalone ReplicaManager.

Not a test and no substitute for bench.latency (no network, no pipeline): a steady figure for
comparing trees on a shared machine, where whole-cluster timings move with the other work.

    .venv/bin/python -m bench.fetch_path [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.apis import fetch
from broker.replication.throttles import ReplicationThrottles
from protocol.fast import encode_fetch_request_v3
from tests.support.replica_managers import records, standalone_replica_manager

IDLE = 17
FOLLOWER = 2


class _Conn:
    sends_files = True

    def request_processed(self) -> None:
        pass


def _ctx(rm: Any, version: int) -> Any:  # noqa: ANN401 - a stand-in for broker.dispatch.RequestContext
    services = SimpleNamespace(replicas=rm, broker_id=rm.broker_id,
                               throttles=ReplicationThrottles(rm.broker_id, 11, 1, lambda: time.monotonic() * 1000),
                               authorizer=SimpleNamespace(enabled=False), metadata=None)
    return SimpleNamespace(services=services, api_version=version, conn=_Conn(), client_id="follower",
                           principal="User:ANONYMOUS")


def _request(rm: Any) -> bytes:
    """A follower's fetch at every partition's log end, in a fresh random order (KIP-73)."""
    parts = [("latency", 0)] + [("__consumer_offsets", i) for i in range(IDLE)]
    random.shuffle(parts)
    topics: dict[str, list[dict[str, int]]] = {}
    for name, idx in parts:
        part = rm.get(name, idx)
        topics.setdefault(name, []).append({"partition": idx, "fetch_offset": part.log_end_offset,
                                            "partition_max_bytes": 1 << 20})
    return encode_fetch_request_v3({"replica_id": FOLLOWER, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 10 << 20,
                                    "topics": [{"topic": t, "partitions": p} for t, p in topics.items()]})


async def run(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        rm = standalone_replica_manager(Path(d))
        rm.broker_id = 1
        for name, idx in [("latency", 0)] + [("__consumer_offsets", i) for i in range(IDLE)]:
            rm.become_leader(name, idx, [1, 2, 3], 0, [1, 2, 3], 0, 0, 1, None)
        busy = rm.get("latency", 0)
        assert busy is not None
        ctx = _ctx(rm, 3)
        one = records(1)
        # Requests built beforehand: their encoding is the follower's cost, not the leader's.
        bodies = []
        for _ in range(n):
            bodies.append(_request(rm))
        spent = 0.0
        for i, body in enumerate(bodies):
            # The follower's next fetch asks for the offset after what it has: append one first
            # (not timed), so the busy partition has one record to send, as at 1,000 msg/s.
            rm.append(busy, one, acks=1)
            t0 = time.thread_time()
            request = fetch.decode(memoryview(body).cast("B"), 3)
            # The follower asks for the record just appended: the offset before it.
            for t in request["topics"]:
                if t["topic"] == "latency":
                    first = t["partitions"][0]
                    if isinstance(first, dict):  # trees that decode partitions as dicts
                        first["fetch_offset"] = busy.log_end_offset - 1
                    else:  # rows: (partition, current leader epoch, fetch offset, max bytes)
                        t["partitions"][0] = (first[0], first[1], busy.log_end_offset - 1, first[3])
            pieces = await fetch.handle(ctx, request)
            spent += time.thread_time() - t0
            assert pieces and i >= 0
        return {"requests": n, "cpu_us_per_request": round(spent * 1e6 / n, 1)}


def main() -> None:
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    args = ap.parse_args()
    print(asyncio.run(run(args.requests)))


if __name__ == "__main__":
    main()
