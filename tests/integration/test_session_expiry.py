"""A broker frozen past zookeeper.session.timeout.ms (SIGSTOP), then thawed (SIGCONT), as issue 19
requires of `docker pause`: it re-registers, steps down where it no longer leads, rejoins the ISR.

The frozen broker here is the controller: its session expires with `/controller`, another broker
takes over and moves its leaderships. When it thaws, the new session's watch events (its own
re-registration first) must not be handled by the controller it no longer is: its state writes
would still match the zkVersions it cached, bump leader epochs behind the real controller's back,
and leave every leader's ISR update refused for good ("leadership changed"). Kafka's controller
resigns when its session expires, before the broker registers again; so must this one.
"""

from __future__ import annotations

import pytest

from tests.support.cluster import Cluster
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration

TOPIC = "frozen"
PARTITIONS = 3
SESSION_TIMEOUT_S = 6.0  # FAST's zookeeper.session.timeout.ms


async def _produce_everywhere(cluster: Cluster, tag: bytes) -> None:
    """One acks=all record to each partition, through its current leader (retried while leaders move)."""
    for p in range(PARTITIONS):
        async def acked(p: int = p) -> bool:
            leader = (await cluster.state(TOPIC, p))["leader"]
            async with await connect(cluster.by_id(leader)) as conn:
                r = await produce(conn, TOPIC, p, [(None, tag)], acks=-1)
            return r["error_code"] == 0
        await cluster.wait_for(f"{tag!r} acknowledged on {TOPIC}-{p}", acked, timeout=30, interval=0.2)


async def test_controller_frozen_past_its_session_rejoins_every_isr(cluster: Cluster) -> None:
    """Three rounds, each freezing whichever broker is the controller then: which of the thawed
    broker's watches reads first after the new session (`/controller` or `/brokers/ids`) varies
    from process to process, and the stale controller did harm only when `/brokers/ids` won."""
    await cluster.create_topic(TOPIC, PARTITIONS, 3)
    everyone = {b.broker_id for b in cluster.brokers}
    for p in range(PARTITIONS):
        await cluster.wait_isr(TOPIC, p, everyone)
    await _produce_everywhere(cluster, b"before")
    for round_ in range(3):
        await _freeze_the_controller_past_its_session(cluster, everyone, round_)


async def _freeze_the_controller_past_its_session(cluster: Cluster, everyone: set[int], round_: int) -> None:
    frozen_id = await cluster.controller()
    frozen = cluster.by_id(frozen_id)
    others = everyone - {frozen_id}
    frozen.pause()
    try:
        async def expired() -> bool:  # its registration went with its session; a new controller took over
            return (str(frozen_id) not in await cluster.zk.get_children("/brokers/ids")
                    and await cluster.controller() in others)
        await cluster.wait_for(f"round {round_}: broker {frozen_id}'s session expired", expired,
                               timeout=SESSION_TIMEOUT_S + 30)

        async def moved() -> bool:
            states = [await cluster.state(TOPIC, p) for p in range(PARTITIONS)]
            return all(s["leader"] in others and frozen_id not in s["isr"] for s in states)
        await cluster.wait_for(f"round {round_}: leaders and ISRs without broker {frozen_id}", moved, timeout=30)
        await _produce_everywhere(cluster, b"while-frozen-%d" % round_)
    finally:
        frozen.resume()

    # Thawed: a new session, registered again, a follower everywhere, back in every ISR.
    await cluster.wait_for(f"round {round_}: broker {frozen_id} registered again",
                           lambda: _registered(cluster, frozen_id), timeout=SESSION_TIMEOUT_S + 30)
    for p in range(PARTITIONS):
        await cluster.wait_isr(TOPIC, p, everyone, timeout=30)
    # It did not act as controller on its expired authority: the controller is still the one that
    # took over, and every state znode was written in that controller's term.
    assert await cluster.controller() in others
    epoch = int((await cluster.zk.get("/controller_epoch"))[0])
    for p in range(PARTITIONS):
        state = await cluster.state(TOPIC, p)
        assert state["controller_epoch"] == epoch, (round_, p, state, epoch)
    assert frozen.log_path.read_text().count("controller.session_expired") >= 1
    # acks=all writes go in everywhere, with the thawed broker in every ISR.
    await _produce_everywhere(cluster, b"after-%d" % round_)


async def _registered(cluster: Cluster, broker_id: int) -> bool:
    return str(broker_id) in await cluster.zk.get_children("/brokers/ids")
