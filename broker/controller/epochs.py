"""KIP-380 on the receiving side: is a controller request meant for this broker, from the controller?

LeaderAndIsr v2+, UpdateMetadata v5+ and StopReplica v1+ carry the receiving broker's epoch,
the creation zxid (czxid) of its registration `/brokers/ids/<id>`, which the controller reads
from ZooKeeper; every one of them carries the controller's epoch, the number in
`/controller_epoch` that each election bumps. A request is obeyed only when both are current:

- broker epoch: a request for an earlier incarnation of this broker (a lower czxid) is stale,
  as in Kafka's `KafkaApis.isBrokerEpochStale`; so is one without an epoch (-1: the old
  versions, which only a client can have sent here, since every minibroker controller sends
  the epoch). A *higher* epoch than the one recorded is accepted by Kafka (the controller may
  see a re-registration before the broker has noted its own czxid); here it is checked
  against the registration znode first, so that a forged epoch is not trusted.
- controller epoch: lower than the one known is STALE_CONTROLLER_EPOCH, as in Kafka. A higher
  one is not trusted on the request's word either (one forged request with 2^31-1 would
  otherwise make every later request from the real controller look stale): it is accepted
  only if `/controller_epoch` holds exactly that number. The broker also watches that znode,
  so it usually knows the current epoch before the new controller's first request arrives.

A refused request changes nothing. Checks that need ZooKeeper and cannot reach it refuse too:
the controller resends what matters when the broker re-registers or the controller changes.
"""

from __future__ import annotations

import structlog

from broker.zk import layout as L
from broker.zk.client import NoNodeError, ZkClient, ZkError
from protocol.errors import ErrorCode

log = structlog.get_logger()

UNKNOWN_BROKER_EPOCH = -1


class ControlRequestEpochs:
    def __init__(self, zk: ZkClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.broker_epoch = UNKNOWN_BROKER_EPOCH  # czxid of this broker's current registration
        self.controller_epoch = 0  # the highest controller epoch ZooKeeper has confirmed

    async def start(self) -> None:
        await self.zk.watch_data(L.CONTROLLER_EPOCH, self._epoch_changed)

    async def _epoch_changed(self, data: bytes | None) -> None:
        epoch = _parse_epoch(data)
        if epoch is not None and epoch > self.controller_epoch:
            self.controller_epoch = epoch

    def registered(self, czxid: int) -> None:
        """This broker (re-)registered: requests for its earlier incarnations are stale from now on."""
        self.broker_epoch = max(self.broker_epoch, czxid)

    async def check(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        """NONE when a controller request may be obeyed; else the error it is refused with."""
        if not await self._broker_epoch_current(broker_epoch):
            log.warning("controller_request.stale_broker_epoch", got=broker_epoch, have=self.broker_epoch)
            return ErrorCode.STALE_BROKER_EPOCH
        if controller_epoch > self.controller_epoch:
            await self._confirm_controller_epoch(controller_epoch)
        if controller_epoch != self.controller_epoch:
            log.warning("controller_request.stale_controller_epoch", got=controller_epoch,
                        have=self.controller_epoch)
            return ErrorCode.STALE_CONTROLLER_EPOCH
        return ErrorCode.NONE

    async def _broker_epoch_current(self, epoch: int) -> bool:
        if epoch == UNKNOWN_BROKER_EPOCH or epoch < self.broker_epoch:
            return False
        if epoch == self.broker_epoch:
            return True
        try:
            czxid = await self.zk.czxid(L.broker_path(self.broker_id))
        except NoNodeError:
            return False
        except ZkError as e:
            log.warning("controller_request.epoch_unverified", what="broker", error=type(e).__name__)
            return False
        if czxid == epoch:
            self.registered(czxid)
            return True
        return False

    async def _confirm_controller_epoch(self, claimed: int) -> None:
        """Reads `/controller_epoch`: the known epoch rises to what ZooKeeper holds, never to `claimed` alone."""
        try:
            data, _ = await self.zk.get(L.CONTROLLER_EPOCH)
        except NoNodeError:
            return
        except ZkError as e:
            log.warning("controller_request.epoch_unverified", what="controller", claimed=claimed,
                        error=type(e).__name__)
            return
        await self._epoch_changed(data)


def _parse_epoch(data: bytes | None) -> int | None:
    try:
        return int((data or b"").decode().strip())
    except (ValueError, UnicodeDecodeError):
        return None
