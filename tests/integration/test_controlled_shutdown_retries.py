"""controlled.shutdown.max.retries and .retry.backoff.ms against a real controller.

Kafka 2.8's leaving broker asks the controller to move its leaderships away; the controller
answers with the partitions it could not move (a replicated partition whose other replicas are
all out of the ISR), and the broker asks again, `retry.backoff.ms` apart, `max.retries` times in
all, then shuts down anyway. The unit tests drive that loop against a stand-in controller; here a
real controller answers "remaining" because the only other replica is hung (SIGSTOP) and has
left the ISR.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.cluster import Cluster

pytestmark = pytest.mark.integration

RETRIES, BACKOFF_MS = 2, 300


def events(log: Path, name: str) -> list[str]:
    """The key=value lines of `log` whose event is `name`."""
    return [line for line in log.read_text().splitlines() if re.search(rf"\bevent='?{re.escape(name)}'?( |$)", line)]


@pytest.fixture
async def cluster(tmp_path: Path, zk_server) -> AsyncIterator[Cluster]:  # noqa: ANN001
    """Three brokers that ask RETRIES times, BACKOFF_MS apart."""
    c = await Cluster.start(tmp_path, zk_server.connect_string, overrides={
        "controlled.shutdown.max.retries": str(RETRIES),
        "controlled.shutdown.retry.backoff.ms": str(BACKOFF_MS),
    })
    try:
        yield c
    finally:
        await c.close()


async def test_leaving_broker_asks_max_retries_times_then_shuts_down(cluster: Cluster) -> None:
    controller = await cluster.controller()
    leaver, hung = [b for b in (0, 1, 2) if b != controller]
    await cluster.create_topic("stuck", assignment={0: [leaver, hung]})
    await cluster.wait_isr("stuck", 0, {leaver, hung})

    # The follower hangs: it leaves the ISR (lag time, or its ZooKeeper session), so the
    # controller has no replica to give the leadership to.
    cluster.by_id(hung).pause()
    try:
        st = await cluster.wait_isr("stuck", 0, {leaver})
        assert st["leader"] == leaver

        b = cluster.by_id(leaver)
        assert b.stop() == 0
        requests = events(b.log_path, "broker.controlled_shutdown_request")
        answers = events(b.log_path, "broker.controlled_shutdown_answer")
        assert len(requests) == RETRIES, requests
        assert [re.search(r"attempt=(\d+)", r).group(1) for r in requests] == [str(i) for i in range(RETRIES)]
        # Each answer named the partition that could not move.
        assert len(answers) == RETRIES and all("remaining=1" in a for a in answers), answers
        incomplete = events(b.log_path, "broker.controlled_shutdown_incomplete")
        assert len(incomplete) == 1 and f"attempts={RETRIES}" in incomplete[0], incomplete
        assert not events(b.log_path, "broker.controlled_shutdown_done")
        # The controller answered every request with the one partition it could not move.
        ctl = events(cluster.by_id(controller).log_path, "controller.controlled_shutdown")
        assert len(ctl) == RETRIES and all(f"broker={leaver}" in c and "remaining=1" in c for c in ctl), ctl
    finally:
        cluster.by_id(hung).resume()


async def test_a_movable_leadership_needs_one_request(cluster: Cluster) -> None:
    controller = await cluster.controller()
    leaver, other = [b for b in (0, 1, 2) if b != controller]
    await cluster.create_topic("movable", assignment={0: [leaver, other]})
    await cluster.wait_isr("movable", 0, {leaver, other})
    b = cluster.by_id(leaver)
    assert b.stop() == 0
    assert len(events(b.log_path, "broker.controlled_shutdown_request")) == 1
    assert len(events(b.log_path, "broker.controlled_shutdown_done")) == 1
    assert not events(b.log_path, "broker.controlled_shutdown_incomplete")
    st = await cluster.state("movable", 0)
    assert st["leader"] == other and st["isr"] == [other]
