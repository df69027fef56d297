"""The controller's partition reassignment (Kafka 0.10.1's onPartitionReassignment).

`/admin/reassign_partitions` holds the moves that are wanted. For each partition, with
OAR its current replicas and RAR the wanted ones:
1. the assignment becomes OAR + (RAR - OAR) in ZooKeeper, the leader epoch is bumped and
   every replica is sent LeaderAndIsr, so the new replicas start fetching from the leader;
2. the controller waits until every replica of RAR is in the ISR (the leader adds a
   follower once it reaches the high watermark);
3. a new leader is elected from RAR if the current one is not in it; the ISR loses the
   replicas of OAR - RAR; the leader epoch is bumped; RAR is told with LeaderAndIsr;
4. the removed replicas get StopReplica with delete;
5. the assignment becomes RAR, the partition leaves `/admin/reassign_partitions`, and the
   znode is deleted once nothing is left in it; UpdateMetadata goes to every broker.

Departures from Kafka: step 2 is a poll of the in-flight partitions' state znodes every
half second instead of a data watch per partition (a handful of reads a second, and
nothing to re-arm after a reconnect). A partition whose wanted replicas include a broker
that is not alive is dropped from the znode with an error log, as Kafka 0.10 does.
A controller that takes over mid-move reads the znode and carries on from step 1, which
is idempotent.
"""

from __future__ import annotations

import asyncio

import structlog

from broker.controller.context import ControllerContext
from broker.controller.reassign_plan import PlanError, format_reassignment, parse_reassignment
from broker.zk import layout as L
from broker.zk.client import BadVersionError, NoNodeError

log = structlog.get_logger()
TP = tuple[str, int]
POLL_S = 0.5


class Reassigner:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.in_flight: dict[TP, list[int]] = {}  # partition -> RAR
        self._poller: asyncio.Task[None] | None = None

    # ---- inputs ------------------------------------------------------------------------

    async def arm(self) -> None:
        await self.ctx.zk.watch_data(L.REASSIGN, self._znode_changed)

    async def _znode_changed(self, data: bytes | None) -> None:
        if self.ctx.active:
            self.ctx.enqueue(lambda: self.on_znode(data) if self.ctx.active else _noop())

    async def resume(self) -> None:
        """On becoming controller: pick up a move a previous controller left running."""
        self.in_flight.clear()
        try:
            data, _ = await self.ctx.zk.get(L.REASSIGN)
        except NoNodeError:
            return
        await self.on_znode(data)

    async def on_znode(self, data: bytes | None) -> None:
        if data is None:
            return
        try:
            wanted = parse_reassignment(data)
        except PlanError as e:
            log.error("reassign.bad_znode", error=str(e))
            await self._delete_znode()
            return
        dropped: list[TP] = []
        for tp, rar in wanted.items():
            if tp in self.in_flight and self.in_flight[tp] == rar:
                continue
            if tp[0] not in self.ctx.assignment or tp[1] not in self.ctx.assignment[tp[0]]:
                log.error("reassign.unknown_partition", topic=tp[0], partition=tp[1])
                dropped.append(tp)
                continue
            dead = [b for b in rar if b not in self.ctx.live]
            if dead:
                log.error("reassign.replicas_not_alive", topic=tp[0], partition=tp[1], replicas=rar, dead=dead)
                dropped.append(tp)
                continue
            await self._start(tp, rar)
        if dropped:
            await self._remove_from_znode(dropped)
        await self.check()

    # ---- steps -------------------------------------------------------------------------

    async def _start(self, tp: TP, rar: list[int]) -> None:
        oar = self.ctx.assignment[tp[0]][tp[1]]
        self.in_flight[tp] = list(rar)
        if set(oar) == set(rar) and oar == rar:
            return  # nothing to move; check() completes it
        union = oar + [b for b in rar if b not in oar]
        log.info("reassign.started", topic=tp[0], partition=tp[1], current=oar, wanted=rar)
        if union != oar:
            await self._write_assignment(tp, union)
        await self._bump_epoch(tp)
        self._tell(union, [tp])
        self.ctx.send_update_metadata(list(self.ctx.live), [tp])
        self._ensure_poller()

    async def check(self) -> None:
        """Completes every in-flight partition whose wanted replicas are all in the ISR."""
        done: list[TP] = []
        for tp, rar in list(self.in_flight.items()):
            if tp[0] not in self.ctx.assignment or tp[1] not in self.ctx.assignment[tp[0]]:
                done.append(tp)  # deleted meanwhile
                continue
            await self.ctx.read_state(*tp)
            cur = self.ctx.states.get(tp)
            if cur is None or not set(rar) <= set(cur[0].isr):
                continue
            if await self._complete(tp, rar):
                done.append(tp)
        for tp in done:
            self.in_flight.pop(tp, None)
        if done:
            await self._remove_from_znode(done)

    async def _complete(self, tp: TP, rar: list[int]) -> bool:
        current = self.ctx.assignment[tp[0]][tp[1]]
        removed = [b for b in current if b not in rar]
        for _ in range(3):
            state, version = self.ctx.states[tp]
            leader = state.leader
            if leader not in rar or leader not in self.ctx.live or leader in self.ctx.shutting_down:
                candidates = [b for b in rar if b in state.isr and b in self.ctx.live and b not in self.ctx.shutting_down]
                if not candidates:
                    log.warning("reassign.no_leader_in_new_replicas", topic=tp[0], partition=tp[1], isr=state.isr)
                    return False
                leader = candidates[0]
            isr = [b for b in state.isr if b in rar]
            new = L.PartitionState(leader, state.leader_epoch + 1, self.ctx.epoch, isr)
            if not await self.ctx.write_state(tp, new, version):
                if tp not in self.ctx.states:
                    return False
                continue
            break
        else:
            return False
        await self._write_assignment(tp, list(rar))
        self._tell(rar, [tp])
        for b in removed:
            self.ctx.send_stop_replica(b, [tp], delete=True)
        self.ctx.send_update_metadata(list(self.ctx.live), [tp])
        log.info("reassign.completed", topic=tp[0], partition=tp[1], replicas=rar, leader=self.ctx.states[tp][0].leader,
                 removed=removed)
        return True

    # ---- helpers -----------------------------------------------------------------------

    def _tell(self, brokers: list[int], tps: list[TP]) -> None:
        for b in brokers:
            if b in self.ctx.live and b not in self.ctx.shutting_down:
                self.ctx.send_leader_and_isr(b, tps)

    async def _bump_epoch(self, tp: TP) -> None:
        """A new leader epoch makes every replica accept the new replica list."""
        for _ in range(3):
            cur = self.ctx.states.get(tp)
            if cur is None:
                return
            state, version = cur
            new = L.PartitionState(state.leader, state.leader_epoch + 1, self.ctx.epoch, state.isr)
            if await self.ctx.write_state(tp, new, version):
                return

    async def _write_assignment(self, tp: TP, replicas: list[int]) -> None:
        topic = tp[0]
        self.ctx.assignment[topic][tp[1]] = list(replicas)
        await self.ctx.zk.set(L.topic_path(topic), L.encode_assignment(self.ctx.assignment[topic]))

    async def _remove_from_znode(self, tps: list[TP]) -> None:
        try:
            data, version = await self.ctx.zk.get(L.REASSIGN)
            wanted = parse_reassignment(data)
        except NoNodeError:
            return
        except PlanError:
            await self._delete_znode()
            return
        for tp in tps:
            wanted.pop(tp, None)
        try:
            if wanted:
                await self.ctx.zk.set(L.REASSIGN, format_reassignment(wanted).encode(), version=version)
            else:
                await self.ctx.zk.delete(L.REASSIGN, version=version)
                log.info("reassign.all_done")
        except (BadVersionError, NoNodeError):
            pass  # changed meanwhile: its watch brings the new content

    async def _delete_znode(self) -> None:
        try:
            await self.ctx.zk.delete(L.REASSIGN)
        except NoNodeError:
            pass

    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        while self.ctx.active and self.in_flight:
            await asyncio.sleep(POLL_S)
            if self.ctx.active:
                self.ctx.enqueue(self.check)

    def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        self.in_flight.clear()


async def _noop() -> None:
    return None
