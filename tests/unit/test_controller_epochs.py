"""broker.controller.epochs: which controller requests a broker obeys (KIP-380), against a stub ZooKeeper."""

from __future__ import annotations

from typing import Any

import pytest

from broker.controller.epochs import UNKNOWN_BROKER_EPOCH, ControlRequestEpochs
from broker.zk.client import NoNodeError, ZkUnavailable
from protocol.errors import ErrorCode


class StubZk:
    def __init__(self, controller_epoch: int | None, czxid: int | None) -> None:
        self.controller_epoch = controller_epoch
        self.czxid_value = czxid
        self.reads = 0
        self.down = False

    async def get(self, path: str) -> tuple[bytes, int]:
        assert path == "/controller_epoch"
        self.reads += 1
        if self.down:
            raise ZkUnavailable("down")
        if self.controller_epoch is None:
            raise NoNodeError(path)
        return str(self.controller_epoch).encode(), 0

    async def czxid(self, path: str) -> int:
        assert path == "/brokers/ids/1"
        self.reads += 1
        if self.down:
            raise ZkUnavailable("down")
        if self.czxid_value is None:
            raise NoNodeError(path)
        return self.czxid_value


def _epochs(zk: StubZk, broker_epoch: int = 100, controller_epoch: int = 5) -> ControlRequestEpochs:
    e = ControlRequestEpochs(zk, 1)  # type: ignore[arg-type]
    e.registered(broker_epoch)
    e.controller_epoch = controller_epoch
    return e


async def test_current_epochs_are_obeyed_without_reading_zookeeper() -> None:
    zk = StubZk(5, 100)
    assert await _epochs(zk).check(5, 100) == ErrorCode.NONE
    assert zk.reads == 0


@pytest.mark.parametrize("broker_epoch", [UNKNOWN_BROKER_EPOCH, 99, 0])
async def test_missing_or_earlier_broker_epochs_are_stale(broker_epoch: int) -> None:
    zk = StubZk(5, 100)
    assert await _epochs(zk).check(5, broker_epoch) == ErrorCode.STALE_BROKER_EPOCH
    assert zk.reads == 0


async def test_a_higher_broker_epoch_is_accepted_only_if_it_is_the_registration_in_zookeeper() -> None:
    zk = StubZk(5, 120)
    e = _epochs(zk)
    assert await e.check(5, 2**63 - 1) == ErrorCode.STALE_BROKER_EPOCH
    assert await e.check(5, 120) == ErrorCode.NONE  # the controller saw our re-registration first
    assert e.broker_epoch == 120
    assert await e.check(5, 100) == ErrorCode.STALE_BROKER_EPOCH


async def test_a_lower_controller_epoch_is_stale() -> None:
    assert await _epochs(StubZk(5, 100)).check(4, 100) == ErrorCode.STALE_CONTROLLER_EPOCH


async def test_a_higher_controller_epoch_is_trusted_only_when_zookeeper_holds_it() -> None:
    zk = StubZk(6, 100)
    e = _epochs(zk)
    assert await e.check(2**31 - 1, 100) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert e.controller_epoch == 6  # learned from ZooKeeper, not from the request
    assert await e.check(6, 100) == ErrorCode.NONE
    zk.controller_epoch = 8
    assert await e.check(7, 100) == ErrorCode.STALE_CONTROLLER_EPOCH  # superseded meanwhile
    assert await e.check(6, 100) == ErrorCode.STALE_CONTROLLER_EPOCH


async def test_unverifiable_epochs_are_refused() -> None:
    zk = StubZk(6, 120)
    zk.down = True
    e = _epochs(zk)
    assert await e.check(6, 100) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert await e.check(5, 120) == ErrorCode.STALE_BROKER_EPOCH
    assert await e.check(5, 100) == ErrorCode.NONE
    assert (e.controller_epoch, e.broker_epoch) == (5, 100)


async def test_the_watch_raises_the_known_epoch_and_never_lowers_it() -> None:
    e = _epochs(StubZk(5, 100))
    watched: Any = e._epoch_changed
    await watched(b"7")
    assert e.controller_epoch == 7
    await watched(b"3")
    await watched(b"garbage")
    await watched(None)
    assert e.controller_epoch == 7
