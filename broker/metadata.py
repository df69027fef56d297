"""This broker's metadata cache, filled by the controller's UpdateMetadata requests.

As in Kafka, brokers do not read topic metadata from ZooKeeper on the request path:
Metadata responses come from what the controller last told this broker. The
controller id is also watched in `/controller` so that clients can find it before the
first UpdateMetadata arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog

from broker.zk import layout as L
from protocol.errors import ErrorCode
from protocol.topic import topic_name_error as topic_name_error

# topic_name_error is re-exported: it lives in protocol/ so that broker/log can use it too.

log = structlog.get_logger()

LEADER_DURING_DELETE = -2


@dataclass
class PartitionInfo:
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    zk_version: int = 0
    controller_epoch: int = 0


@dataclass
class MetadataCache:
    # brokers[id].host/port: the inter-broker listener's endpoint (fetchers, controlled shutdown).
    brokers: dict[int, L.BrokerInfo] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    controller_id: int = -1
    inter_broker_listener: str = "PLAINTEXT"

    def endpoints_for(self, listener: str) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker with an endpoint on `listener`, by id:
        a client is told the addresses of the listener it connected to, as Kafka does
        (MetadataCache.getAliveEndpoints); a broker without that listener is left out."""
        out = []
        for bid in sorted(self.brokers):
            info = self.brokers[bid]
            ep = info.endpoint(listener)
            if ep is not None:
                out.append((bid, ep.host, ep.port, info.rack))
        return out

    def partition_metadata(self, topic: str, listener: str, api_version: int) -> list[dict[str, Any]]:
        """A topic's partitions as a Metadata response lists them to a client on `listener`, by
        Kafka 2.8's MetadataCache.getPartitionMetadata: a leader that is not alive is
        LEADER_NOT_AVAILABLE; a live leader with no endpoint on this listener is
        LISTENER_NOT_FOUND from v6 (LEADER_NOT_AVAILABLE before), leader -1 either way, so a
        client never dials an address of another listener. v0 lists only replicas reachable on
        the listener and answers REPLICA_NOT_AVAILABLE when one is left out; v1+ lists all."""
        only_reachable = api_version == 0  # Kafka's errorUnavailableEndpoints

        def reachable(b: int) -> bool:
            info = self.brokers.get(b)
            return info is not None and info.endpoint(listener) is not None

        out = []
        for p, info in sorted(self.topics[topic].items()):
            replicas = [b for b in info.replicas if reachable(b)] if only_reachable else list(info.replicas)
            isr = [b for b in info.isr if reachable(b)] if only_reachable else list(info.isr)
            entry: dict[str, Any] = {
                "error_code": ErrorCode.NONE, "partition_index": p, "leader_id": info.leader,
                "leader_epoch": info.leader_epoch, "replica_nodes": replicas, "isr_nodes": isr,
                "offline_replicas": []}
            if info.leader < 0 or info.leader not in self.brokers:
                entry["error_code"] = ErrorCode.LEADER_NOT_AVAILABLE
                entry["leader_id"] = -1
            elif not reachable(info.leader):
                entry["error_code"] = (ErrorCode.LISTENER_NOT_FOUND if api_version >= 6
                                       else ErrorCode.LEADER_NOT_AVAILABLE)
                entry["leader_id"] = -1
            elif len(replicas) < len(info.replicas) or len(isr) < len(info.isr):
                entry["error_code"] = ErrorCode.REPLICA_NOT_AVAILABLE
            out.append(entry)
        return out

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        parts = self.topics.get(topic)
        return None if parts is None else parts.get(index)

    def update(self, request: dict[str, Any]) -> None:
        """Apply an UpdateMetadata request (v0-v2 shapes)."""
        self.controller_id = request["controller_id"]
        brokers: dict[int, L.BrokerInfo] = {}
        for b in request["live_brokers"]:
            bid = b["id"]
            eps = b.get("endpoints") or []
            if eps:
                names = {v: k for k, v in L.SECURITY_PROTOCOL_IDS.items()}
                endpoints = tuple(
                    L.Endpoint(ep.get("listener") or names.get(ep["security_protocol"], "PLAINTEXT"), ep["host"],
                               ep["port"], names.get(ep["security_protocol"], "PLAINTEXT"))
                    for ep in eps)
                inter = next((ep for ep in endpoints if ep.listener == self.inter_broker_listener), endpoints[0])
                brokers[bid] = L.BrokerInfo(bid, inter.host, inter.port, b.get("rack"), endpoints=endpoints)
            else:
                brokers[bid] = L.BrokerInfo(bid, b.get("v0_host", ""), b.get("v0_port", 0))
        self.brokers = brokers
        for ps in request["ungrouped_partition_states"]:
            topic, index = ps["topic_name"], ps["partition_index"]
            if topic_name_error(topic) is not None or index < 0:
                # Every tool creates legal names only, so this is a forged request; kept out of
                # the cache so no Metadata answer, znode path or log directory is built from it.
                log.warning("metadata.invalid_partition_ignored", topic=topic[:255], partition=index)
                continue
            if ps["leader"] == LEADER_DURING_DELETE:
                parts = self.topics.get(topic)
                if parts is not None:
                    parts.pop(index, None)
                    if not parts:
                        del self.topics[topic]
                continue
            self.topics.setdefault(topic, {})[index] = PartitionInfo(
                ps["leader"], ps["leader_epoch"], list(ps["isr"]), list(ps["replicas"]),
                ps.get("zk_version", 0), ps["controller_epoch"])
