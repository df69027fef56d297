"""Controller election through the ephemeral `/controller` znode, with `/controller_epoch`.

This is the election only; the controller's duties (leader election, LeaderAndIsr,
UpdateMetadata, StopReplica, topic deletion) arrive with the cluster issue.
"""

from __future__ import annotations

import time

import structlog

from broker import zk_layout as L
from broker.zk import NodeExistsError, NoNodeError, ZkClient

log = structlog.get_logger()


class Controller:
    def __init__(self, zk: ZkClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.epoch = 0
        self.active = False

    async def start(self) -> None:
        await self.zk.watch_data(L.CONTROLLER, self._controller_changed)

    async def _controller_changed(self, data: bytes | None) -> None:
        if data is not None:
            try:
                self.active = int(L.loads(data)["brokerid"]) == self.broker_id
            except (ValueError, KeyError, TypeError):
                log.warning("controller.bad_znode")
            return
        self.active = False
        await self._elect()

    async def _elect(self) -> None:
        body = L.dumps({"version": 1, "brokerid": self.broker_id, "timestamp": str(int(time.time() * 1000))})
        try:
            await self.zk.create(L.CONTROLLER, body, ephemeral=True)
        except NodeExistsError:
            return
        self.epoch = await self._bump_epoch()
        self.active = True
        log.info("controller.elected", controller_epoch=self.epoch)

    async def _bump_epoch(self) -> int:
        while True:
            try:
                data, version = await self.zk.get(L.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    await self.zk.create(L.CONTROLLER_EPOCH, b"1")
                    return 1
                except NodeExistsError:
                    continue
            epoch = int(data.decode() or 0) + 1
            try:
                await self.zk.set(L.CONTROLLER_EPOCH, str(epoch).encode(), version=version)
                return epoch
            except Exception as e:  # lost a race with another candidate's write; read again
                log.info("controller.epoch_retry", error=type(e).__name__)
