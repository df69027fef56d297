"""The controller's shared state and the operations its parts share (controller.py, reassign.py).

What the controller knows (live brokers, assignments, partition states with their zkVersion,
brokers in controlled shutdown, its epoch), its one ordered event queue, the conditional
writes of partition state znodes, and the inter-broker requests built from that state.
Both the controller's own event handlers and the reassigner work through this object, so
neither reaches into the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from broker.controller.channel import ControllerChannel
from broker.controller.epochs import UNKNOWN_BROKER_EPOCH
from broker.zk import layout as L
from broker.zk.client import BadVersionError, FencedError, NoNodeError, ZkClient
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

log = structlog.get_logger()

LEADER_DURING_DELETE = -2

TP = tuple[str, int]
Event = Callable[[], Awaitable[None]]


class ControllerContext:
    def __init__(self, zk: ZkClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.epoch = 0
        self.epoch_zk_version = -1  # of /controller_epoch when this term began: the fence of its writes
        self.active = False
        self.live: dict[int, L.BrokerInfo] = {}
        # KIP-380: each live broker's epoch, the czxid of its registration; sent in every request to it.
        self.broker_epochs: dict[int, int] = {}
        self.assignment: dict[str, dict[int, list[int]]] = {}
        self.states: dict[TP, tuple[L.PartitionState, int]] = {}
        self.shutting_down: set[int] = set()
        self.channel: ControllerChannel | None = None
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        # (broker, partitions) a LeaderAndIsr answered KAFKA_STORAGE_ERROR for; the controller's hook.
        self.on_storage_errors: Callable[[int, list[TP]], None] | None = None

    # ---- events ----------------------------------------------------------------------

    def enqueue(self, fn: Event) -> None:
        """Run `fn` on the controller's event queue, after every event queued before it."""
        self._events.put_nowait(fn)

    async def next_event(self) -> Event:
        return await self._events.get()

    # ---- partition state znodes ------------------------------------------------------

    async def read_state(self, topic: str, p: int) -> None:
        """Reload one partition's state (and zkVersion) from its znode; forgotten when absent or bad."""
        try:
            data, version = await self.zk.get(L.partition_state_path(topic, p))
            self.states[(topic, p)] = (L.PartitionState.decode(data), version)
        except NoNodeError:
            self.states.pop((topic, p), None)
        except Exception:
            log.warning("controller.bad_partition_state", topic=topic, partition=p)
            self.states.pop((topic, p), None)

    async def read_states(self, topic: str, partitions: list[int]) -> None:
        """`read_state` for many partitions of a topic, their reads pipelined (ZkClient.get_many)."""
        got = await self.zk.get_many([L.partition_state_path(topic, p) for p in partitions])
        for p, item in zip(partitions, got, strict=True):
            if item is None:
                self.states.pop((topic, p), None)
                continue
            try:
                self.states[(topic, p)] = (L.PartitionState.decode(item[0]), item[1])
            except Exception:
                log.warning("controller.bad_partition_state", topic=topic, partition=p)
                self.states.pop((topic, p), None)

    async def write_state(self, tp: TP, new: L.PartitionState, version: int) -> bool:
        """Conditional set on the state znode; on a version conflict, the state is re-read and False returned.

        Nothing is written once this broker has stopped being the controller (its session
        expired, or another broker holds `/controller`): an event that was running then would
        otherwise write with zkVersions that still match, as a second controller. The write itself
        is fenced as Kafka's are (one multi-op with a check of `/controller_epoch`'s zkVersion),
        so that not even a write already under way when another controller was elected lands.
        """
        if not self.active:
            log.info("controller.write_skipped", topic=tp[0], partition=tp[1], reason="no longer controller")
            return False
        try:
            new_version = await self.zk.set_fenced(L.partition_state_path(*tp), new.encode(), version,
                                                   L.CONTROLLER_EPOCH, self.epoch_zk_version)
        except FencedError:
            log.warning("controller.fenced", topic=tp[0], partition=tp[1], controller_epoch=self.epoch)
            self.active = False  # a later election moved /controller_epoch: this term is over
            return False
        except BadVersionError:
            await self.read_state(*tp)
            return False
        self.states[tp] = (new, new_version)
        return True

    # ---- requests to brokers ---------------------------------------------------------

    def partition_state_body(self, tp: TP, deleting: bool = False) -> dict[str, Any]:
        state, version = self.states.get(tp, (L.PartitionState(-1, 0, self.epoch, []), 0))
        return {"topic_name": tp[0], "partition_index": tp[1], "controller_epoch": state.controller_epoch,
                "leader": LEADER_DURING_DELETE if deleting else state.leader, "leader_epoch": state.leader_epoch,
                "isr": state.isr, "zk_version": version, "partition_epoch": version,
                "replicas": self.assignment.get(tp[0], {}).get(tp[1], [])}

    def _header(self, broker_id: int) -> dict[str, Any]:
        """Who sends (id, epoch) and which incarnation of the receiver it is meant for (KIP-380)."""
        return {"controller_id": self.broker_id, "controller_epoch": self.epoch,
                "broker_epoch": self.broker_epochs.get(broker_id, UNKNOWN_BROKER_EPOCH)}

    def send_leader_and_isr(self, broker_id: int, partitions: list[TP]) -> None:
        tps = [tp for tp in partitions if tp in self.states]
        if not tps or self.channel is None:
            return
        leaders = {self.states[tp][0].leader for tp in tps}
        body = {**self._header(broker_id),
                "topic_states": _by_topic([self.partition_state_body(tp) for tp in tps]),
                "live_leaders": [{"broker_id": b, "host_name": self.live[b].host, "port": self.live[b].port}
                                 for b in sorted(leaders) if b in self.live]}
        # 30 s, plus 10 ms a partition: 10,000 partitions get 130 s before the request is retried.
        sent = self.channel.send(broker_id, ApiKey.LEADER_AND_ISR, 2, body, timeout=30 + 0.01 * len(tps))
        if self.on_storage_errors is not None:
            sent.add_done_callback(lambda fut: self._leader_and_isr_answered(broker_id, fut))

    def _leader_and_isr_answered(self, broker_id: int, fut: asyncio.Future[dict[str, Any] | None]) -> None:
        """Kafka's LeaderAndIsrResponseReceived: the partitions answered KAFKA_STORAGE_ERROR have an
        offline replica on that broker. Never a reason to send the same request again."""
        if fut.cancelled() or fut.exception() is not None:
            return
        resp = fut.result()
        if not resp or resp.get("error_code", 0) != 0 or self.on_storage_errors is None:
            return
        failed = [(e["topic_name"], e["partition_index"]) for e in resp.get("partition_errors", [])
                  if e["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR]
        if failed:
            self.on_storage_errors(broker_id, failed)

    def send_update_metadata(self, brokers: list[int], partitions: list[TP], deleting: bool = False) -> None:
        if self.channel is None:
            return
        states = [self.partition_state_body(tp, deleting) for tp in partitions if deleting or tp in self.states]
        live = [{"id": b.broker_id, "rack": b.rack,
                 "endpoints": [{"port": ep.port, "host": ep.host, "listener": ep.listener,
                                "security_protocol": L.SECURITY_PROTOCOL_IDS.get(ep.security_protocol, 0)}
                               for ep in b.all_endpoints()]}
                for b in self.live.values()]
        body = {"topic_states": _by_topic(states), "live_brokers": live}
        for b in brokers:
            self.channel.send(b, ApiKey.UPDATE_METADATA, 5, {**self._header(b), **body})

    def send_stop_replica(self, broker_id: int, partitions: list[TP], delete: bool) -> None:
        if not partitions or self.channel is None:
            return
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        body = {**self._header(broker_id), "delete_partitions": delete,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
        self.channel.send(broker_id, ApiKey.STOP_REPLICA, 1, body)


def _by_topic(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Partition states grouped by topic, as LeaderAndIsr v2+ and UpdateMetadata v5+ carry them."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for ps in states:
        topics.setdefault(ps["topic_name"], []).append(ps)
    return [{"topic_name": t, "partition_states": ps} for t, ps in topics.items()]
