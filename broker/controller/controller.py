"""The controller (Kafka 0.10.1's ZooKeeper design): one broker, elected through `/controller`.

It decides partition leaders and ISRs and tells brokers on the wire with Kafka's
inter-broker APIs: LeaderAndIsr v2 (roles), UpdateMetadata v5 (everyone's metadata
cache) and StopReplica v1 (stop or delete a replica), each carrying the receiving broker's
epoch (KIP-380: the czxid of its registration, read with the registration; a broker whose
czxid changed between two reads has bounced and is handled as failed, then started). Its
inputs are ZooKeeper watches on `/brokers/ids`, `/brokers/topics`, `/admin/delete_topics`,
`/isr_change_notification` and `/log_dir_event_notification` (a broker's failed log directory:
broker.controller.log_dir_events), plus ControlledShutdown requests. Events are processed one
at a time, in order, as Kafka's controller event thread does.

Decisions follow Kafka: leader = the first live replica (in assignment order) that is in
the ISR; with `unclean.leader.election.enable=false` a partition whose ISR has no live
replica goes offline (its state znode is left alone) until one returns. A dead broker
leaves every ISR at once, as in Kafka's onBrokerFailure: when it dies, and on failover,
where the new controller compares every ISR with the live brokers (so a controller that
died is removed from the ISRs of partitions led elsewhere, as Kafka's replica state
machine does at start-up). State znodes are written with a conditional set on their
zkVersion, so a leader's concurrent ISR change is never overwritten blindly.

This object is also where the broker's own epochs live (`epochs`, as Kafka keeps the broker
epoch in its KafkaController): the checks of incoming controller requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from broker.controller.channel import ControllerChannel
from broker.controller.context import ControllerContext
from broker.controller.epochs import ControlRequestEpochs
from broker.controller.first_state import coherent, first_state, replacing
from broker.controller.log_dir_events import no_leader, take_notifications
from broker.controller.reassign import Reassigner
from broker.zk import layout as L
from broker.zk.client import (
    BadVersionError,
    FencedError,
    NodeExistsError,
    NoNodeError,
    Watch,
    ZkClient,
    ZkError,
)
from fetcher.security import PLAINTEXT, ClientSecurity

log = structlog.get_logger()

# Partition state znodes created (_bring_online) or read (_read_topic) at once.
_CREATE_WINDOW = 256
_READ_WINDOW = 1000


TP = tuple[str, int]


class Controller:
    def __init__(self, zk: ZkClient, broker_id: int, unclean_leader_election: bool = False,
                 inter_broker_listener: str = "PLAINTEXT", security: ClientSecurity = PLAINTEXT) -> None:
        self.zk = zk
        self.security = security  # how the channel connects to that listener
        # Whose endpoint the controller connects to and hands out as a leader's (live_leaders).
        self.inter_broker_listener = inter_broker_listener
        self.broker_id = broker_id
        self.unclean = unclean_leader_election
        self.ctx = ControllerContext(zk, broker_id)
        self._worker: asyncio.Task[None] | None = None
        self._watches_armed = False
        # One data watch per existing topic (partition growth); cancelled when the topic goes, or
        # every name ever created would keep a watch task, its aiozk callbacks and a server watch.
        self._topic_watches: dict[str, Watch] = {}
        # Brokers whose log directory failed: alive, but never leader nor in an ISR until they register again.
        self.dir_offline: set[int] = set()
        # Replicas a broker answered KAFKA_STORAGE_ERROR for (a log it could not open, out of
        # descriptors perhaps): never leader nor in the ISR until that broker registers again.
        self.offline_replicas: dict[int, set[TP]] = {}
        self.ctx.on_storage_errors = self._storage_errors_answered
        self.reassigner = Reassigner(self.ctx)
        self.epochs = ControlRequestEpochs(zk, broker_id)

    @property
    def active(self) -> bool:
        """This broker is the controller now."""
        return self.ctx.active

    # ---- election --------------------------------------------------------------------

    async def start(self) -> None:
        await self.epochs.start()
        self._worker = asyncio.create_task(self._process())
        self.zk.on_session_expired(self._session_expired)
        await self.zk.watch_data(L.CONTROLLER, self._controller_changed)

    def _session_expired(self) -> None:
        """Our session expired, and `/controller` with it: another broker may lead by now.

        As Kafka's controller does on expiry, this one stops at once, before the broker registers
        again on the new session: otherwise the watch events of the new session (our own
        re-registration among them) would be handled by a controller that is no longer one, whose
        state writes (its cached zkVersions still match) would bump leader epochs behind the real
        controller's back, leaving leaders that never learn of it and ISRs that can never grow.
        """
        if self.ctx.active:
            log.warning("controller.session_expired", controller_epoch=self.ctx.epoch)
            self.ctx.active = False
            self.ctx.enqueue(self._resign)

    async def stop(self) -> None:
        self.ctx.active = False
        self.reassigner.stop()
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except (asyncio.CancelledError, Exception):
                pass
        if self.ctx.channel is not None:
            await self.ctx.channel.close()

    async def _process(self) -> None:
        while True:
            fn = await self.ctx.next_event()
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller.event_failed")

    async def _controller_changed(self, data: bytes | None) -> None:
        if data is not None:
            try:
                holder = int(L.loads(data)["brokerid"])
            except (ValueError, KeyError, TypeError):
                log.warning("controller.bad_znode")
                return
            if holder != self.broker_id and (self.ctx.active or self.ctx.channel is not None):
                self.ctx.active = False  # from now on, no event of this term writes or sends
                self.ctx.enqueue(self._resign)
            return
        self.ctx.enqueue(self._elect)

    async def _elect(self) -> None:
        body = L.dumps({"version": 1, "brokerid": self.broker_id, "timestamp": str(int(time.time() * 1000))})
        try:
            await self.zk.create(L.CONTROLLER, body, ephemeral=True)
        except NodeExistsError:
            return
        self.ctx.epoch, self.ctx.epoch_zk_version = await self._bump_epoch()
        if self.ctx.channel is not None:  # an earlier term's, not yet closed by its _resign
            await self.ctx.channel.close()
        self.ctx.active = True
        log.info("controller.elected", controller_epoch=self.ctx.epoch)
        self.ctx.channel = ControllerChannel(self.broker_id, self.security)
        if not self._watches_armed:
            self._watches_armed = True
            await self.zk.watch_children(L.BROKER_IDS, self._on(self._brokers_changed))
            await self.zk.watch_children(L.BROKER_TOPICS, self._on(self._topics_changed))
            await self.zk.watch_children(L.DELETE_TOPICS, self._on(self._delete_requested))
            await self.zk.watch_children(L.ISR_CHANGE, self._on(self._isr_changed))
            await self.zk.watch_children(L.LOG_DIR_EVENT, self._on(self._log_dirs_failed))
            await self.reassigner.arm()
        await self._failover()

    async def _resign(self) -> None:
        if self.ctx.active:
            return  # elected again since this was queued: the new term keeps its channel
        log.info("controller.resigned")
        self.reassigner.stop()
        if self.ctx.channel is not None:
            await self.ctx.channel.close()
            self.ctx.channel = None

    def _on(self, handler: Callable[[list[str]], Awaitable[None]]) -> Callable[[list[str]], Awaitable[None]]:
        async def cb(children: list[str]) -> None:
            if self.ctx.active:
                self.ctx.enqueue(lambda: handler(children) if self.ctx.active else _noop())
        return cb

    async def _bump_epoch(self) -> tuple[int, int]:
        """The new controller epoch, and the zkVersion of `/controller_epoch` holding it (which
        every state write of this term checks: a later election moves it)."""
        while True:
            try:
                data, version = await self.zk.get(L.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    await self.zk.create(L.CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = int((data or b"0").decode() or 0) + 1
            try:
                return epoch, await self.zk.set(L.CONTROLLER_EPOCH, str(epoch).encode(), version=version)
            except BadVersionError:
                continue

    # ---- loading ---------------------------------------------------------------------

    async def _read_brokers(self) -> tuple[dict[int, L.BrokerInfo], dict[int, int]]:
        """Live brokers' registrations and their epochs (czxid), read together."""
        out: dict[int, L.BrokerInfo] = {}
        epochs: dict[int, int] = {}
        for child in await self.zk.get_children(L.BROKER_IDS):
            try:
                bid = int(child)
                data, czxid = await self.zk.get_created(L.broker_path(bid))
                out[bid] = L.BrokerInfo.decode(bid, data, self.inter_broker_listener)
                epochs[bid] = czxid
            except NoNodeError:
                continue  # gone since the listing
            except Exception as e:
                log.warning("controller.bad_broker_znode", znode=child, error=type(e).__name__)
        return out, epochs

    async def _read_topic(self, topic: str) -> None:
        try:
            data, _ = await self.zk.get(L.topic_path(topic))
            self.ctx.assignment[topic] = L.decode_assignment(data)
        except NoNodeError:
            self.ctx.assignment.pop(topic, None)
            return
        except Exception:
            log.warning("controller.bad_topic_znode", topic=topic)
            return
        # _READ_WINDOW reads in flight at a time, pipelined without a task each (ZkClient.get_many):
        # one round trip after another was ~1 ms per partition, a task and a timeout each ~80 µs
        # of the loop's time, most of the controller's start-up with 10,000 partitions.
        parts = list(self.ctx.assignment[topic])
        for start in range(0, len(parts), _READ_WINDOW):
            await self.ctx.read_states(topic, parts[start:start + _READ_WINDOW])
        if topic not in self._topic_watches:
            self._topic_watches[topic] = await self.zk.watch_data(L.topic_path(topic),
                                                                  self._assignment_changed_cb(topic))

    async def _failover(self) -> None:
        started = time.monotonic()
        self.ctx.live, self.ctx.broker_epochs = await self._read_brokers()
        assert self.ctx.channel is not None
        self.ctx.channel.set_brokers(self.ctx.live)
        self.ctx.assignment.clear()
        self.ctx.states.clear()
        for topic in await self.zk.get_children(L.BROKER_TOPICS):
            await self._read_topic(topic)
        for gone in [t for t in self._topic_watches if t not in self.ctx.assignment]:
            self._topic_watches.pop(gone).cancel()  # deleted while another broker was the controller
        read = time.monotonic()
        await self._bring_online(self._all_partitions())
        # Brokers that died before this election (the previous controller among them) leave every
        # ISR now, not after the leaders' replica.lag.time.max.ms.
        await self._remove_dead_from_isrs(self._all_partitions())
        decided = time.monotonic()
        # LeaderAndIsr before UpdateMetadata on each broker's ordered channel, as Kafka's request
        # batch does: a client must never learn of a leader before the leader knows it leads.
        for bid in self.ctx.live:
            self.ctx.send_leader_and_isr(bid, self._partitions_on(bid))
        self.ctx.send_update_metadata(list(self.ctx.live), self._all_partitions())
        log.info("controller.failover_sent", partitions=len(self.ctx.states), read_s=round(read - started, 3),
                 decide_s=round(decided - read, 3), build_s=round(time.monotonic() - decided, 3))
        await self._delete_requested(await self.zk.get_children(L.DELETE_TOPICS))
        await self._isr_changed(await self.zk.get_children(L.ISR_CHANGE))
        await self._log_dirs_failed(await self.zk.get_children(L.LOG_DIR_EVENT))
        await self.reassigner.resume()

    def _all_partitions(self) -> list[TP]:
        return [(t, p) for t, parts in self.ctx.assignment.items() for p in parts]

    def _partitions_on(self, broker_id: int) -> list[TP]:
        return [tp for tp in self._all_partitions() if broker_id in self.ctx.assignment[tp[0]][tp[1]]]

    # ---- leader election -------------------------------------------------------------

    def _leads(self, state: L.PartitionState) -> bool:
        """Its leader may go on leading: registered, not shutting down, its log directory online."""
        return (state.leader in self.ctx.live and state.leader not in self.ctx.shutting_down
                and state.leader not in self.dir_offline)

    def _alive(self, replicas: list[int]) -> list[int]:
        """The assigned replicas that may be in a first state, in assignment order: registered, log
        directory online. (Kafka's isReplicaOnline also leaves out a broker in controlled shutdown;
        the first states here have never done so.)"""
        return [r for r in replicas if r in self.ctx.live and r not in self.dir_offline]

    async def _bring_online(self, partitions: list[TP], new: bool = False) -> list[TP]:
        """New partitions get a first state; partitions whose leader is gone get a new one.

        `new`: the brokers have not been told of these partitions yet (a topic or partitions just
        created): one whose state znode was found there already is adopted (`_adopt`: kept, or
        replaced when it cannot be this assignment's) and returned among the changed, to be sent
        (Kafka's controller, at a failover, keeps such a state; at creation it only logs a failed
        state change for it and leaves the partition without a leader until its next failover).

        The first states are written _CREATE_WINDOW partitions a ZooKeeper multi-op (each
        partition's `partitions/<n>` and its `state`), after each topic's `partitions` znode:
        one create a znode, with the parents' creates each tried first, were ~7 requests a
        partition, 17 s of the event loop's time creating 10,000 partitions (py-spy). A window
        whose multi fails (a znode there already) is written as before, concurrently, one create
        a partition. The order of the states written does not matter; each is its own znode.
        """
        changed = []
        fresh: list[tuple[TP, L.PartitionState]] = []
        for tp in partitions:
            replicas = self.ctx.assignment[tp[0]][tp[1]]
            cur = self.ctx.states.get(tp)
            if cur is None:
                state = first_state(self._alive(replicas), self.ctx.epoch)
                if state is not None:
                    fresh.append((tp, state))
            elif new:
                if not self.ctx.active:
                    break
                if await self._adopt(tp):
                    changed.append(tp)
            elif not self._leads(cur[0]):
                if not self.ctx.active:
                    break
                if await self._elect_leader(tp):
                    changed.append(tp)
        for topic in sorted({tp[0] for tp, _ in fresh}):
            if not self.ctx.active:
                break
            await self.zk.ensure_path(L.partitions_path(topic))  # each partition's parent, once a topic
        for start in range(0, len(fresh), _CREATE_WINDOW):
            if not self.ctx.active:
                break  # no longer the controller: no first state written on an expired authority
            window = fresh[start:start + _CREATE_WINDOW]
            # One multi-op for the window's `partitions/<n>` and `partitions/<n>/state` znodes; if
            # any existed (a controller that failed over mid-way), they are made one by one.
            nodes = [node for tp, state in window
                     for node in ((L.partition_path(*tp), b""), (L.partition_state_path(*tp), state.encode()))]
            # Fenced as write_state's sets are (and Kafka's createTopicPartitionStatesRaw): a
            # controller superseded meanwhile creates no state with its expired epoch.
            guard = (L.CONTROLLER_EPOCH, self.ctx.epoch_zk_version)
            try:
                made_all = await self.zk.create_all(nodes, guard)
            except FencedError:
                self._fenced(window[0][0])
                break
            if made_all:
                for tp, state in window:
                    self.ctx.states[tp] = (state, 0)
                    changed.append(tp)
                continue
            log.info("controller.first_states_one_by_one", partitions=len(window), topic=window[0][0][0])
            results = await asyncio.gather(*(self.zk.create(L.partition_state_path(*tp), state.encode(),
                                                            make_parents=True, guard=guard) for tp, state in window),
                                           return_exceptions=True)
            fenced = any(isinstance(result, FencedError) for result in results)
            # A partition whose create failed otherwise is left without a state, and the others
            # go on (Kafka's initializeLeaderAndIsrForPartitions logs a failed state change for
            # it): raising here dropped the states made beside it, in ZooKeeper but never sent.
            failed: list[TP] = []
            failure: Exception | None = None
            for (tp, state), result in zip(window, results, strict=True):
                if isinstance(result, FencedError) or (fenced and isinstance(result, NodeExistsError)):
                    continue  # no longer the controller: it decides nothing more
                elif isinstance(result, NodeExistsError):
                    # Written since it was read (another writer): adopted as a found one is.
                    await self.ctx.read_state(*tp)
                    if await self._adopt(tp):
                        changed.append(tp)
                elif isinstance(result, Exception):
                    failed.append(tp)
                    failure = failure or result
                elif isinstance(result, BaseException):
                    raise result  # a cancellation
                else:
                    self.ctx.states[tp] = (state, 0)
                    changed.append(tp)
            if failure is not None:
                log.warning("controller.first_state_failed", partitions=len(failed), topic=failed[0][0],
                            partition=failed[0][1], error=repr(failure))
            if fenced:
                self._fenced(window[0][0])
                break
        return changed

    async def _adopt(self, tp: TP) -> bool:
        """A state found where a new partition's first state was to be written: True if `tp` has
        a state to send after it.

        A state coherent with the assignment (broker.controller.first_state.coherent) is kept,
        and a leader elected from it when its own may not lead, as a failover handles a state it
        reads. Any other is a leftover of another incarnation and is replaced by the first state
        Kafka would have written, with the next leader epoch, in a conditional set fenced by the
        controller epoch (ControllerContext.write_state). Kafka 2.8 neither keeps nor replaces
        it at creation (a failed state change, the partition without a leader until a failover,
        which would then keep or elect from the leftover); a replacement gives the partition the
        leader and ISR its creation asked for, and no broker can hold data of this incarnation yet.
        When no assigned replica is alive the leftover is left as it is, as Kafka writes nothing then.
        """
        for _ in range(3):
            cur = self.ctx.states.get(tp)
            if cur is None or not self.ctx.active:
                return False
            stale, version = cur
            replicas = self.ctx.assignment[tp[0]][tp[1]]
            if coherent(stale, replicas):
                return self._leads(stale) or await self._elect_leader(tp)
            state = replacing(stale, self._alive(replicas), self.ctx.epoch)
            if state is None:
                log.warning("controller.stale_state_kept", broker_id=self.broker_id, topic=tp[0], partition=tp[1],
                            stale_leader=stale.leader, stale_isr=stale.isr, replicas=replicas,
                            reason="no assigned replica alive")
                return False
            if await self.ctx.write_state(tp, state, version):
                log.warning("controller.stale_state_replaced", broker_id=self.broker_id, topic=tp[0],
                            partition=tp[1], stale_leader=stale.leader, stale_isr=stale.isr,
                            stale_leader_epoch=stale.leader_epoch, replicas=replicas, leader=state.leader,
                            leader_epoch=state.leader_epoch, isr=state.isr)
                return True
            # Its zkVersion moved (re-read by write_state), or this controller was fenced: decided again.
        return False

    def _fenced(self, tp: TP) -> None:
        """A write found `/controller_epoch` moved: another controller was elected, this term is over."""
        log.warning("controller.fenced", topic=tp[0], partition=tp[1], controller_epoch=self.ctx.epoch)
        self.ctx.active = False

    async def _elect_leader(self, tp: TP, excluding: int | None = None) -> bool:
        for _ in range(3):
            cur = self.ctx.states.get(tp)
            if cur is None:
                return False
            state, version = cur
            replicas = self.ctx.assignment[tp[0]][tp[1]]
            live_isr = [r for r in state.isr if r in self.ctx.live and r != excluding and r not in self.dir_offline
                        and tp not in self.offline_replicas.get(r, ())]
            candidates = [r for r in replicas if r in live_isr and r not in self.ctx.shutting_down]
            if candidates:
                leader, isr = candidates[0], live_isr
            elif self.unclean:
                alive = [r for r in replicas if r in self.ctx.live and r != excluding
                         and r not in self.ctx.shutting_down and r not in self.dir_offline]
                if not alive:
                    log.warning("controller.partition_offline", topic=tp[0], partition=tp[1])
                    return False
                leader, isr = alive[0], [alive[0]]
                log.warning("controller.unclean_election", topic=tp[0], partition=tp[1], leader=leader)
            else:
                log.warning("controller.partition_offline", topic=tp[0], partition=tp[1], isr=state.isr)
                return False
            new = L.PartitionState(leader, state.leader_epoch + 1, self.ctx.epoch, isr)
            if not await self.ctx.write_state(tp, new, version):
                continue
            log.info("controller.leader_elected", topic=tp[0], partition=tp[1], leader=leader,
                     leader_epoch=new.leader_epoch, isr=isr)
            return True
        return False

    async def _remove_dead_from_isrs(self, partitions: list[TP]) -> list[TP]:
        """Every replica not on a live broker leaves the ISR of a partition led by a live one."""
        changed = []
        for tp in partitions:
            cur = self.ctx.states.get(tp)
            # An offline partition keeps its ISR: whichever of its members returns first may lead cleanly.
            if cur is None or cur[0].leader not in self.ctx.live:
                continue
            for b in [r for r in cur[0].isr if r not in self.ctx.live]:
                if await self._remove_from_isr(tp, b) and tp not in changed:
                    changed.append(tp)
        if changed:
            log.info("controller.isr_dead_removed", partitions=len(changed))
        return changed

    async def _remove_from_isr(self, tp: TP, broker_id: int) -> bool:
        """`broker_id` leaves the ISR of a partition it does not lead; an ISR of that one replica
        alone is kept (Kafka 2.8's doRemoveReplicasFromIsr never empties an ISR): an offline
        partition's last member may lead cleanly once it is back, and an empty ISR could only
        lead again by an unclean election."""
        for _ in range(3):
            cur = self.ctx.states.get(tp)
            if (cur is None or broker_id not in cur[0].isr or cur[0].leader == broker_id
                    or cur[0].isr == [broker_id]):
                return False
            state, version = cur
            new = L.PartitionState(state.leader, state.leader_epoch + 1, self.ctx.epoch,
                                   [r for r in state.isr if r != broker_id])
            if await self.ctx.write_state(tp, new, version):
                return True
        return False

    # ---- events ----------------------------------------------------------------------

    async def _brokers_changed(self, children: list[str]) -> None:
        fresh, epochs = await self._read_brokers()
        # A broker registered again between two reads (a new czxid) has bounced: what the controller
        # told its earlier incarnation is gone, so it fails and starts, as in Kafka (KIP-380).
        bounced = [b for b in fresh if b in self.ctx.live and epochs[b] != self.ctx.broker_epochs.get(b)]
        dead = [b for b in self.ctx.live if b not in fresh] + bounced
        new = [b for b in fresh if b not in self.ctx.live] + bounced
        if bounced:
            log.info("controller.brokers_bounced", brokers=bounced)
        if dead:
            # Handled as gone first, so the failure's decisions (new leaders, ISRs) leave them out.
            self.ctx.live = {b: info for b, info in fresh.items() if b not in bounced}
        else:
            self.ctx.live = fresh
        self.ctx.broker_epochs = epochs
        assert self.ctx.channel is not None
        self.ctx.channel.set_brokers(self.ctx.live)
        self.ctx.shutting_down -= set(dead)
        # A broker registering again has opened its log directory anew (Kafka's onBrokerStartup).
        self.dir_offline -= set(dead) | set(new)
        for b in set(dead) | set(new):
            self.offline_replicas.pop(b, None)
        if dead:
            log.info("controller.brokers_failed", brokers=dead)
            changed = await self._bring_online(self._all_partitions())
            for tp in await self._remove_dead_from_isrs(self._all_partitions()):
                if tp not in changed:
                    changed.append(tp)
            self._propagate(changed)
            self.ctx.live = fresh
            self.ctx.channel.set_brokers(self.ctx.live)
        if new:
            log.info("controller.brokers_started", brokers=new)
            changed = await self._bring_online(self._all_partitions())
            for b in new:
                self.ctx.send_leader_and_isr(b, self._partitions_on(b))
            self._propagate(changed, update_metadata=False)
            self.ctx.send_update_metadata(list(self.ctx.live), self._all_partitions())

    def _propagate(self, changed: list[TP], update_metadata: bool = True) -> None:
        if not changed:
            return
        by_broker: dict[int, list[TP]] = {}
        for tp in changed:
            for r in self.ctx.assignment[tp[0]][tp[1]]:
                # A broker in controlled shutdown is not told (Kafka's ControlledShutdownLeaderSelector
                # leaves it out): as a follower it would fetch, catch up and rejoin the ISR.
                # Nor is a replica that answered KAFKA_STORAGE_ERROR (Kafka's OfflineReplica): it
                # would fail the same way again.
                if (r in self.ctx.live and r not in self.ctx.shutting_down
                        and tp not in self.offline_replicas.get(r, ())):
                    by_broker.setdefault(r, []).append(tp)
        for b, tps in by_broker.items():
            self.ctx.send_leader_and_isr(b, tps)
        if update_metadata:
            self.ctx.send_update_metadata(list(self.ctx.live), changed)

    async def _topics_changed(self, children: list[str]) -> None:
        current = set(children)
        new_topics = [t for t in children if t not in self.ctx.assignment]
        for gone in [t for t in self.ctx.assignment if t not in current]:
            self._forget_topic(gone)
        changed: list[TP] = []
        for t in new_topics:
            await self._read_topic(t)
            if t in self.ctx.assignment:
                log.info("controller.topic_created", topic=t, partitions=len(self.ctx.assignment[t]))
                changed += await self._bring_online([(t, p) for p in self.ctx.assignment[t]], new=True)
        self._propagate(changed)

    def _assignment_changed_cb(self, topic: str) -> Callable[[bytes | None], Awaitable[None]]:
        async def cb(data: bytes | None) -> None:
            if not self.ctx.active or data is None:
                return

            async def handle() -> None:
                if topic not in self.ctx.assignment:
                    return
                try:
                    fresh = L.decode_assignment(data)
                except Exception:
                    log.warning("controller.bad_topic_znode", topic=topic)
                    return
                added = [p for p in fresh if p not in self.ctx.assignment[topic]]
                if not added:
                    return
                self.ctx.assignment[topic] = fresh
                for p in added:
                    await self.ctx.read_state(topic, p)
                log.info("controller.partitions_added", topic=topic, partitions=added)
                self._propagate(await self._bring_online([(topic, p) for p in added], new=True))
            self.ctx.enqueue(handle)
        return cb

    def _forget_topic(self, topic: str) -> None:
        for p in self.ctx.assignment.pop(topic, {}):
            self.ctx.states.pop((topic, p), None)
            for offline in self.offline_replicas.values():
                offline.discard((topic, p))
        watch = self._topic_watches.pop(topic, None)
        if watch is not None:
            watch.cancel()

    async def _delete_requested(self, children: list[str]) -> None:
        for topic in children:
            if topic in self.ctx.assignment:
                tps = [(topic, p) for p in self.ctx.assignment[topic]]
                replicas = {r for p in self.ctx.assignment[topic].values() for r in p}
                for b in replicas:
                    self.ctx.send_stop_replica(b, [tp for tp in tps if b in self.ctx.assignment[topic][tp[1]]], delete=True)
                self.ctx.send_update_metadata(list(self.ctx.live), tps, deleting=True)
                try:
                    await self.zk.delete_recursive(L.topic_path(topic))
                except NoNodeError:
                    pass
                try:
                    await self.zk.delete(f"/config/topics/{topic}")
                except NoNodeError:
                    pass
                self._forget_topic(topic)
                log.info("controller.topic_deleted", topic=topic)
            try:
                await self.zk.delete(f"{L.DELETE_TOPICS}/{topic}")
            except NoNodeError:
                pass

    async def _isr_changed(self, children: list[str]) -> None:
        touched: list[TP] = []
        for child in sorted(children):
            path = f"{L.ISR_CHANGE}/{child}"
            try:
                data, _ = await self.zk.get(path)
                for item in L.loads(data).get("partitions", []):
                    tp = (str(item["topic"]), int(item["partition"]))
                    if tp[0] in self.ctx.assignment and tp not in touched:
                        touched.append(tp)
            except NoNodeError:
                continue
            except Exception:
                log.warning("controller.bad_isr_notification", znode=child)
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass
        for tp in touched:
            await self.ctx.read_state(*tp)
        if touched:
            self.ctx.send_update_metadata(list(self.ctx.live), touched)

    async def _log_dirs_failed(self, children: list[str]) -> None:
        """Kafka's onBrokerLogDirFailure: every replica on the named brokers goes offline."""
        brokers = [b for b in await take_notifications(self.zk, children) if b in self.ctx.live]
        if not brokers:
            return
        self.dir_offline |= set(brokers)
        changed: list[TP] = []
        for b in brokers:
            for tp in self._partitions_on(b):
                cur = self.ctx.states.get(tp)
                if cur is None:
                    continue
                if cur[0].leader == b:
                    if await self._elect_leader(tp, excluding=b) or await self._drop_leader(tp, b):
                        changed.append(tp)
                elif await self._remove_from_isr(tp, b):
                    changed.append(tp)
            log.warning("controller.log_dir_failed", broker=b, partitions_changed=len(changed))
        self._propagate(changed)

    def _storage_errors_answered(self, broker_id: int, partitions: list[TP]) -> None:
        self.ctx.enqueue(lambda: self._replicas_offline(broker_id, partitions))

    async def _replicas_offline(self, broker_id: int, partitions: list[TP]) -> None:
        """Kafka's onReplicasBecomeOffline for replicas a LeaderAndIsr answer named: a partition
        they lead gets another leader from the rest of its ISR (if none is left, it stays as it is:
        the broker answers KAFKA_STORAGE_ERROR for it), and they leave the ISR of the others.
        Nothing is sent again to that broker for them: the same request would fail the same way."""
        if broker_id not in self.ctx.live:
            return
        offline = self.offline_replicas.setdefault(broker_id, set())
        fresh = [tp for tp in partitions if tp not in offline and tp in self.ctx.states]
        offline.update(fresh)
        changed: list[TP] = []
        for tp in fresh:
            cur = self.ctx.states.get(tp)
            if cur is None:
                continue
            if cur[0].leader == broker_id:
                if await self._elect_leader(tp, excluding=broker_id):
                    changed.append(tp)
            elif await self._remove_from_isr(tp, broker_id):
                changed.append(tp)
        if fresh:
            log.warning("controller.replicas_offline", broker=broker_id, partitions=len(fresh),
                        partitions_changed=len(changed))
        self._propagate(changed)

    async def _drop_leader(self, tp: TP, broker_id: int) -> bool:
        """No other replica can lead: leader -1, so that clients stop sending to a broker that cannot serve."""
        for _ in range(3):
            cur = self.ctx.states.get(tp)
            if cur is None or cur[0].leader != broker_id:
                return False
            if await self.ctx.write_state(tp, no_leader(cur[0], self.ctx.epoch), cur[1]):
                return True
        return False

    # ---- controlled shutdown ---------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP] | None:
        """Move leadership off `broker_id`; answer the partitions it still leads.

        None, and nothing done, unless `broker_epoch` is that broker's current epoch (the czxid of
        its registration, which the Kafka protocol tells no one but that broker), so a client naming
        another broker is refused (STALE_BROKER_EPOCH).
        """
        if broker_epoch < 0:
            # Versions 0-1 carry no epoch: refused at once, not behind whatever the event queue
            # is doing (a forger's request must not wait on, or for, the controller's work).
            log.warning("controller.controlled_shutdown_refused", broker=broker_id, broker_epoch=broker_epoch)
            return None
        done: asyncio.Future[list[TP] | None] = asyncio.get_running_loop().create_future()

        async def handle() -> None:
            if not await self._is_current_epoch(broker_id, broker_epoch):
                log.warning("controller.controlled_shutdown_refused", broker=broker_id, broker_epoch=broker_epoch,
                            current=self.ctx.broker_epochs.get(broker_id))
                done.set_result(None)
                return
            if broker_id not in self.ctx.live:
                done.set_result([])
                return
            self.ctx.shutting_down.add(broker_id)
            changed = []
            for tp in self._partitions_on(broker_id):
                cur = self.ctx.states.get(tp)
                if cur is None:
                    continue
                state = cur[0]
                if state.leader == broker_id:
                    if len(self.ctx.assignment[tp[0]][tp[1]]) > 1 and await self._elect_leader(tp, excluding=broker_id):
                        changed.append(tp)
                else:
                    self.ctx.send_stop_replica(broker_id, [tp], delete=False)
                    if await self._remove_from_isr(tp, broker_id):
                        changed.append(tp)
            self._propagate(changed)
            remaining = [tp for tp in self._partitions_on(broker_id)
                         if tp in self.ctx.states and self.ctx.states[tp][0].leader == broker_id
                         and len(self.ctx.assignment[tp[0]][tp[1]]) > 1]
            log.info("controller.controlled_shutdown", broker=broker_id, moved=len(changed), remaining=len(remaining))
            done.set_result(remaining)
        self.ctx.enqueue(handle)
        return await done

    async def _is_current_epoch(self, broker_id: int, broker_epoch: int) -> bool:
        if broker_epoch < 0:
            return False
        if self.ctx.broker_epochs.get(broker_id) == broker_epoch:
            return True
        # The broker may have registered again since the controller last read the brokers.
        try:
            return await self.zk.czxid(L.broker_path(broker_id)) == broker_epoch
        except ZkError:
            return False  # absent (NoNode), or unverifiable now: refused either way


async def _noop() -> None:
    return None
