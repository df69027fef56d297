"""Dynamic config applied to this broker's parts: what each `/config/<type>/<name>` change does.

broker.zk.dynamic_config reads and validates the entity znodes; the handlers here hand the
values to their owners: broker entities to the KIP-73 throttles and the log cleaner's I/O bound,
topic entities to the topic config cache, the throttled replica lists, the partitions'
`min.insync.replicas` and their log settings (retention, segment size and time, cleanup policy),
client entities to the KIP-13 byte-rate and KIP-599 mutation quotas, and so do user and
user+client-id entities (KIP-55: `<user>` or `<user>/clients/<id>`, the user sanitized or
`<default>`); the SCRAM credentials those user znodes also hold are not read here.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.log_cleaning import CleanerRate
from broker.log_config import log_config
from broker.metrics import bounded
from broker.replication.replica_manager import ReplicaManager
from broker.replication.throttles import ReplicationThrottles
from broker.zk.config_entities import (
    BROKERS,
    CLIENTS,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT_ENTITY,
    PRODUCER_BYTE_RATE,
    TOPICS,
    USERS,
    desanitize,
)
from broker.zk.dynamic_config import Handler
from broker.zk.topic_configs import TopicConfigs, topic_int
from quotas.client import ClientQuotaManager
from quotas.controller_mutation import ControllerMutationQuotaManager

log = structlog.get_logger()


class ConfigApplier:
    def __init__(self, default_min_isr: int, throttles: ReplicationThrottles, topic_configs: TopicConfigs,
                 replicas: ReplicaManager, produce_quotas: ClientQuotaManager, fetch_quotas: ClientQuotaManager,
                 mutation_quotas: ControllerMutationQuotaManager, now_ms: Callable[[], float],
                 cleaner_rate: CleanerRate | None = None) -> None:
        self.default_min_isr = default_min_isr
        self.throttles = throttles
        self.topic_configs = topic_configs
        self.replicas = replicas
        self.produce_quotas = produce_quotas
        self.fetch_quotas = fetch_quotas
        self.mutation_quotas = mutation_quotas
        self.now_ms = now_ms
        self.cleaner_rate = cleaner_rate

    def handlers(self) -> dict[str, Handler]:
        """For DynamicConfigManager: one handler per entity type."""
        return {BROKERS: self.on_broker_config, TOPICS: self.on_topic_config, CLIENTS: self.on_client_config,
                USERS: self.on_user_config}

    async def on_broker_config(self, name: str, config: dict[str, str]) -> None:
        self.throttles.on_broker_config(name, config)
        if self.cleaner_rate is not None:
            self.cleaner_rate.on_broker_config(name, config)

    async def on_client_config(self, znode_name: str, config: dict[str, str]) -> None:
        self._set_quotas(None, _client_id(znode_name), config)

    async def on_user_config(self, name: str, config: dict[str, str]) -> None:
        """`<user>` or `<user>/clients/<id>`: the user stays sanitized (Kafka's UserEntity), the
        client id is desanitized (its ClientIdEntity)."""
        parts = name.split("/")
        if len(parts) == 1:
            self._set_quotas(parts[0], None, config)
        elif len(parts) == 3 and parts[1] == CLIENTS:
            self._set_quotas(parts[0], _client_id(parts[2]), config)
        else:  # as Kafka's UserConfigHandler, which refuses the path
            log.warning("quota.bad_user_entity", entity=bounded(name))

    def _set_quotas(self, user: str | None, client_id: str | None, config: dict[str, str]) -> None:
        # Only the three quota keys: a user znode's SCRAM credentials are never read or logged here.
        def num(key: str) -> float | None:
            return None if key not in config else float(config[key])

        self.produce_quotas.set_quota(user, client_id, num(PRODUCER_BYTE_RATE))
        self.fetch_quotas.set_quota(user, client_id, num(CONSUMER_BYTE_RATE))
        self.mutation_quotas.set_quota(user, client_id, num(CONTROLLER_MUTATION_RATE), self.now_ms())
        entity = {} if user is None else {"user": bounded(user)}
        if client_id is not None:
            entity["client_id"] = bounded(client_id)
        log.info("quota.user_config" if user is not None else "quota.client_config", **entity,
                 producer_byte_rate=num(PRODUCER_BYTE_RATE), consumer_byte_rate=num(CONSUMER_BYTE_RATE),
                 controller_mutation_rate=num(CONTROLLER_MUTATION_RATE))

    async def on_topic_config(self, topic: str, config: dict[str, str]) -> None:
        self.topic_configs.set(topic, config)
        self.throttles.on_topic_config(topic, config)
        self.replicas.set_min_insync_replicas(
            topic, topic_int(topic, config, "min.insync.replicas", self.default_min_isr))
        # Retention and rolling (issue 17): segment.bytes/ms, retention.*, cleanup.policy, live.
        self.replicas.set_topic_log_config(topic, log_config(topic, config, self.replicas.config))


def _client_id(znode_name: str) -> str:
    # Kafka URL-encodes client ids in znode names (so "/" and odd characters fit).
    return znode_name if znode_name == DEFAULT_ENTITY else desanitize(znode_name)
