"""Dynamic config reaching its owners: client quotas, topic configs and min.insync.replicas, throttles."""

from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from broker.config_apply import ConfigApplier
from broker.metrics import Registry
from broker.replication.replica_manager import ReplicaManager
from broker.replication.throttles import ReplicationThrottles
from broker.zk.client import ZkClient
from broker.zk.topic_configs import TopicConfigs
from quotas.client import ClientQuotaManager
from quotas.controller_mutation import ControllerMutationQuotaManager

LONG_MAX = 2**63 - 1


def applier(tmp_path: Path) -> ConfigApplier:
    zk = ZkClient("127.0.0.1:1")  # never started: the topic config cache is fed, not read
    config = BrokerConfig(broker_id=1, log_dirs=[tmp_path], min_insync_replicas=1)
    return ConfigApplier(1, ReplicationThrottles(1, 11, 1, lambda: 0.0), TopicConfigs(zk),
                         ReplicaManager(config, zk, Registry(), clock=lambda: 0.0),
                         ClientQuotaManager("produce", 11, 1, LONG_MAX, {}),
                         ClientQuotaManager("fetch", 11, 1, LONG_MAX, {}),
                         ControllerMutationQuotaManager(11, 1), lambda: 0.0)


async def test_client_config_sets_every_quota_of_the_desanitized_client(tmp_path: Path) -> None:
    a = applier(tmp_path)
    await a.handlers()["clients"]("app%2F1", {"producer_byte_rate": "1000", "controller_mutation_rate": "5"})
    assert a.produce_quotas.quota("app/1") == 1000
    assert a.fetch_quotas.quota("app/1") is None
    assert a.mutation_quotas.quota("app/1") == 5


async def test_topic_config_reaches_cache_throttles_and_partitions(tmp_path: Path) -> None:
    a = applier(tmp_path)
    part = a.replicas.become_leader("t", 0, [1, 2], 0, [1, 2], 0, 1, 1, None)
    cfg = {"min.insync.replicas": "2", "leader.replication.throttled.replicas": "0:1"}
    await a.handlers()["topics"]("t", cfg)
    assert part.min_insync_replicas == 2
    assert await a.topic_configs.get("t") == cfg
    assert a.throttles.leader.is_throttled("t", 0)
    await a.handlers()["topics"]("t", {"min.insync.replicas": "x"})  # does not parse: the broker's default
    assert part.min_insync_replicas == 1


async def test_broker_config_sets_the_throttle_rates(tmp_path: Path) -> None:
    a = applier(tmp_path)
    await a.handlers()["brokers"]("1", {"leader.replication.throttled.rate": "500"})
    await a.handlers()["brokers"]("2", {"follower.replication.throttled.rate": "500"})  # another broker's
    assert (a.throttles.leader.quota, a.throttles.follower.quota) == (500, None)


async def test_user_configs_set_the_user_levels_and_ignore_scram_credentials(tmp_path: Path) -> None:
    a = applier(tmp_path)
    scram = "salt=c2FsdA==,stored_key=a2V5,server_key=c2tleQ==,iterations=4096"
    await a.handlers()["users"]("alice", {"producer_byte_rate": "2000", "SCRAM-SHA-256": scram})
    await a.handlers()["users"]("alice/clients/app%2F1", {"consumer_byte_rate": "500"})
    await a.handlers()["users"]("<default>/clients/<default>", {"controller_mutation_rate": "3"})
    assert a.produce_quotas.quota("app/1", user="alice") == 2000
    assert a.fetch_quotas.quota("app/1", user="alice") == 500
    assert a.fetch_quotas.quota("other", user="alice") is None
    assert a.mutation_quotas.quota("x", user="bob") == 3
    assert a.produce_quotas.entities.quotas == {("alice", None): 2000.0}  # nothing from the SCRAM key
    await a.handlers()["users"]("alice", {})  # the znode emptied or deleted: the quota goes
    assert a.produce_quotas.quota("app/1", user="alice") is None


async def test_a_user_entity_path_of_another_shape_is_ignored(tmp_path: Path) -> None:
    a = applier(tmp_path)
    await a.handlers()["users"]("alice/groups/x", {"producer_byte_rate": "2000"})
    assert a.produce_quotas.entities.quotas == {}
