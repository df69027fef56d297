"""The fuzz suite in the test command: one dedicated broker, mutated real-client requests for
every served API, a good client beside them, and the broker's health checked afterwards.

A few minutes at most: FUZZ_REQUESTS requests or FUZZ_SECONDS, whichever comes first
(MINIBROKER_FUZZ_REQUESTS, MINIBROKER_FUZZ_SECONDS). The cases are deterministic (seed printed;
MINIBROKER_FUZZ_SEED picks another); MINIBROKER_FUZZ_EXCLUDE=create_topics,... leaves APIs out.
What it found is replayed, one test per defect, in test_findings.py. Inter-broker requests are
fuzzed too; their mutants carry the epochs of the broker the seeds were captured from, so KIP-380's
checks refuse them, and the good client's topic is one no mutation can name anyway.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from protocol.api_keys import ApiKey
from tests.fuzz.runner import (
    answers,
    dirs_outside,
    fuzz_seed,
    random_topic,
    run_fuzz,
    socket_count,
    sockets_back,
    tracebacks,
)
from tests.support.topics import create_topic

pytestmark = pytest.mark.integration

FUZZ_REQUESTS = int(os.environ.get("MINIBROKER_FUZZ_REQUESTS", "50000"))
FUZZ_SECONDS = float(os.environ.get("MINIBROKER_FUZZ_SECONDS", "150"))
MAX_FRAME = 1 << 20  # socket.request.max.bytes of the broker under test: oversized frames go past it
RSS_GROWTH_BOUND = 64 << 20
RSS_LIMIT = 1 << 30  # the machine is shared: past this the fuzz stops and the broker is killed
# API names whose seeds to leave out (comma-separated), to look past a known finding; none by default.
EXCLUDE = tuple(int(ApiKey[n.strip().upper()]) for n in os.environ.get("MINIBROKER_FUZZ_EXCLUDE", "").split(",")
                if n.strip())


def _broker_sockets(pid: int) -> str:
    """The broker's TCP sockets as `ss` shows them, to say which ones a failed check left open."""
    out = subprocess.run(["ss", "-tanpH"], capture_output=True, text=True).stdout
    return "\n".join(line for line in out.splitlines() if f"pid={pid}," in line)


async def test_fuzz_leaves_broker_healthy(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory(0, socket_request_max_bytes=str(MAX_FRAME), auto_create_topics_enable="false")
    seed = fuzz_seed()
    print(f"fuzz seed {seed} (MINIBROKER_FUZZ_SEED to choose another)")
    topic = random_topic(seed)
    await create_topic(b, topic)
    assert b.proc is not None
    pid = b.proc.pid
    sockets_before = socket_count(pid)
    dirs_before = dirs_outside(b.workdir, b.log_dir)

    result = await run_fuzz(pid, b.port, topic, zk_connect=b.zk_connect, seed=seed, requests=FUZZ_REQUESTS, duration=FUZZ_SECONDS,
                            max_frame=MAX_FRAME, rss_limit=RSS_LIMIT, exclude=EXCLUDE)
    s = result.stats
    print(f"sent {s.sent} requests over {s.connections} connections in {result.elapsed:.0f}s: "
          f"{s.responses} answered, {s.closed_by_broker} closed by the broker, {s.timeouts} timed out, "
          f"{s.refused} refused connects; good client {result.good.batches} batches, "
          f"{len(result.good.errors)} errors, p99 {result.good_p99_ms()} ms")

    print("unanswered (the last 200):\n  " + "\n  ".join(s.timed_out))
    if result.rss_exceeded:
        b.kill()
        pytest.fail(f"broker RSS passed {RSS_LIMIT >> 20} MiB; fuzz stopped, broker killed")
    assert b.proc.poll() is None, "broker died; last cases sent:\n" + "\n".join(s.recent) + "\n" + b.log()
    assert await answers(b.port), "broker does not answer ApiVersions and Metadata after the fuzz"
    assert result.good.errors == [], result.good.errors[:10]
    assert result.good.acked, "the good client got nothing acknowledged"
    assert await result.good.verify() == []
    found = tracebacks(b.log_path.read_text())
    assert not found, f"{len(found)} tracebacks in the broker log; the first:\n{found[0]}"

    rss_after = result.samples[-1].rss if result.samples else 0
    print(f"broker RSS {result.rss_before >> 20} MiB before, {rss_after >> 20} MiB after")
    assert rss_after - result.rss_before < RSS_GROWTH_BOUND
    assert dirs_outside(b.workdir, b.log_dir) - dirs_before == set()
    sockets_after = await sockets_back(pid, sockets_before)
    assert sockets_after <= sockets_before, _broker_sockets(pid)
    assert s.refused == 0, "the broker refused connections during the fuzz"
