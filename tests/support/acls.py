"""ACLs written straight into ZooKeeper, as Kafka's kafka-acls `--authorizer-properties
zookeeper.connect=...` does: the way to seed a cluster whose brokers refuse everyone until an
ACL lets them in (the znode, then the change notification every broker follows)."""

from __future__ import annotations

import asyncio

from broker.security.acl import (
    AclEntry,
    AclOperation,
    PatternType,
    PermissionType,
    Policy,
    ResourcePattern,
    ResourceType,
)
from broker.security.authorizer import Authorizer
from tests.support.zookeeper import zk_connect

ANONYMOUS = "User:ANONYMOUS"
CLUSTER = ResourcePattern(ResourceType.CLUSTER, "kafka-cluster")


def allow(op: AclOperation, principal: str = ANONYMOUS, host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, PermissionType.ALLOW)


def deny(op: AclOperation, principal: str = ANONYMOUS, host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, PermissionType.DENY)


def topic(name: str, pattern: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, pattern)


def group(name: str, pattern: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(ResourceType.GROUP, name, pattern)


def seed(zk_connect_string: str, acls: dict[ResourcePattern, list[AclEntry]]) -> None:
    """Adds `acls` through ZooKeeper (conditional writes on zkVersion plus notifications)."""
    async def write() -> None:
        async with zk_connect(zk_connect_string) as zk:
            writer = Authorizer(zk, Policy(), enabled=True)
            await writer.store.ensure_paths()  # type: ignore[union-attr]
            for pattern, entries in acls.items():
                await writer.update(pattern, lambda current, new=frozenset(entries): current | new)
    asyncio.run(write())


# What a broker needs of the cluster resource to run at all while every connection is
# User:ANONYMOUS (controller requests, replica fetches) and to let the tests create topics.
BROKER_CLUSTER_ACLS = [allow(AclOperation.CLUSTER_ACTION), allow(AclOperation.CREATE), allow(AclOperation.DESCRIBE),
                       allow(AclOperation.ALTER)]
