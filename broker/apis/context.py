"""What request handlers may use of their broker: `BrokerServices`, a narrow, typed view.

Handlers in broker/apis/ see the broker only through `RequestContext.services`; the Broker
(broker.server) satisfies this Protocol structurally. Anything a handler needs is listed
here, so the list is the handlers' whole dependency on the rest of the broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker.apis.admin import Admin
    from broker.apis.config_admin import ConfigAdmin
    from broker.config import BrokerConfig
    from broker.controller.controller import Controller
    from broker.group.coordinator import GroupCoordinator
    from broker.group.store import GroupStore
    from broker.metadata import MetadataCache
    from broker.metrics import Registry
    from broker.replication.replica_manager import ReplicaManager
    from broker.replication.roles import PartitionRoles
    from broker.replication.throttles import ReplicationThrottles
    from broker.security.authorizer import Authorizer
    from broker.security.sasl_listeners import SaslListeners
    from broker.signal import Signal
    from broker.zk.producer_ids import ProducerIdManager
    from quotas.client import ClientQuotaManager
    from quotas.controller_mutation import ControllerMutationQuotaManager


class BrokerServices(Protocol):
    @property
    def broker_id(self) -> int: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def config(self) -> BrokerConfig: ...

    # Partitions hosted here: reads, appends, follower fetch bookkeeping; the controller's role changes.
    @property
    def replicas(self) -> ReplicaManager: ...
    @property
    def roles(self) -> PartitionRoles: ...
    @property
    def throttles(self) -> ReplicationThrottles: ...

    # Cluster metadata as the controller last told it; fired on every UpdateMetadata.
    @property
    def metadata(self) -> MetadataCache: ...
    @property
    def metadata_updated(self) -> Signal: ...
    def metadata_changed(self) -> None: ...

    # Quotas: KIP-13 byte rates, KIP-599 partition mutations.
    @property
    def produce_quotas(self) -> ClientQuotaManager: ...
    @property
    def fetch_quotas(self) -> ClientQuotaManager: ...
    @property
    def mutation_quotas(self) -> ControllerMutationQuotaManager: ...
    def now_ms(self) -> float: ...

    # Producer ids for InitProducerId (blocks claimed in ZooKeeper).
    @property
    def producer_ids(self) -> ProducerIdManager: ...

    # Topic administration (ZooKeeper writes) and the controller (ControlledShutdown).
    @property
    def admin(self) -> Admin: ...
    @property
    def controller(self) -> Controller: ...

    # Config resources (Describe/Alter/IncrementalAlterConfigs), written as `minibroker configs` does.
    @property
    def config_admin(self) -> ConfigAdmin: ...

    # The consumer-group coordinator (broker/group): the group APIs' whole view of groups and offsets.
    @property
    def group_coordinator(self) -> GroupCoordinator: ...
    # The ACL authorizer (broker/security); handlers reach it through broker/apis/authorization.py.
    @property
    def authorizer(self) -> Authorizer: ...
    # SASL: each SASL listener's settings and each connection's session (dispatch's gate, SaslHandshake...).
    @property
    def sasl(self) -> SaslListeners: ...
    # `__consumer_offsets` (FindCoordinator's partition for a group; the coordinator's store).
    @property
    def group_store(self) -> GroupStore: ...


class DispatchHost(BrokerServices, Protocol):
    """What the dispatcher itself needs on top: the registry for its request metrics."""

    @property
    def metrics(self) -> Registry: ...
