"""The ACL authorizer (Kafka 2.8's kafka.security.authorizer.AclAuthorizer), live on every broker.

Enabled by `authorizer.class.name` (Kafka's `kafka.security.authorizer.AclAuthorizer`, or
`minibroker`); without it `Authorizer.enabled` is False, nothing is checked and the ACL APIs
answer SECURITY_DISABLED. The decision is broker.security.acl's (pure); this module keeps its
cache in step with ZooKeeper: a full load at start, then every `/kafka-acl-changes` and
`/kafka-acl-extended-changes` notification re-reads the resource it names, as Kafka's
AclChangedNotificationHandler. Writes (CreateAcls, DeleteAcls, `minibroker acls`) go through
`update`: read, change, conditional set on zkVersion, retried on a concurrent change, then the
notification. The principal comes from the request context (User:ANONYMOUS until SASL/TLS).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import structlog

from broker.security.acl import (
    AclEntry,
    AclOperation,
    AclTable,
    PatternType,
    Policy,
    ResourcePattern,
    ResourceType,
    authorized_operations,
    decide,
    decode_acls,
    encode_acls,
    parse_name,
    pascal,
)
from broker.zk.acl_store import AclStore, StoredPattern
from broker.zk.client import BadVersionError, Watch, ZkClient

log = structlog.get_logger()



class Counter(Protocol):
    def inc(self, amount: float = 1.0, **labels: str) -> None: ...


def to_stored(p: ResourcePattern) -> StoredPattern:
    return StoredPattern(pascal(p.resource_type.name), p.name, p.pattern_type.name)


def from_stored(s: StoredPattern) -> ResourcePattern:
    return ResourcePattern(ResourceType(parse_name(ResourceType, s.resource_type)), s.name,
                           PatternType(parse_name(PatternType, s.pattern_type)))


class Authorizer:
    def __init__(self, zk: ZkClient | None, policy: Policy, enabled: bool, broker_id: int = -1,
                 denials: Counter | None = None) -> None:
        self.denials = denials  # authorization_denials_total{api}
        self.enabled = enabled
        self.policy = policy
        self.table = AclTable()
        self.store = AclStore(zk) if zk is not None else None
        self.broker_id = broker_id
        self._watches: list[Watch] = []

    async def start(self) -> None:
        if self.store is None:
            return
        await self.store.ensure_paths()
        if not self.enabled:
            return
        self._watches = await self.store.watch_changes(self._reload)
        for stored, data in (await self.store.read_all()).items():
            self._apply(stored, data)
        log.info("authorizer.loaded", broker_id=self.broker_id, resources=len(self.table.by_pattern))

    def stop(self) -> None:
        for w in self._watches:
            w.cancel()
        self._watches.clear()

    def _apply(self, stored: StoredPattern, data: bytes | None) -> None:
        try:
            self.table.set(from_stored(stored), decode_acls(data))
        except (ValueError, KeyError, TypeError) as e:
            log.warning("authorizer.bad_acl_znode", broker_id=self.broker_id, resource_type=stored.resource_type,
                        resource=stored.name, pattern_type=stored.pattern_type, error=str(e))

    async def _reload(self, stored: StoredPattern) -> None:
        assert self.store is not None
        data, _ = await self.store.read(stored)
        self._apply(stored, data)
        log.debug("authorizer.resource_reloaded", broker_id=self.broker_id, resource_type=stored.resource_type,
                  resource=stored.name, pattern_type=stored.pattern_type)

    # ---- decisions ---------------------------------------------------------------------------

    def allowed(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        if not self.enabled:
            return True
        return decide(self.table, self.policy, principal, host, operation, resource_type, name)

    def operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> frozenset[AclOperation]:
        return authorized_operations(self.table, self.policy, principal, host, resource_type, name)

    # ---- changes (CreateAcls, DeleteAcls) ------------------------------------------------------

    async def update(self, pattern: ResourcePattern,
                     change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]) -> frozenset[AclEntry]:
        """AclAuthorizer.updateResourceAcls: apply `change` to the stored set at its zkVersion."""
        assert self.store is not None
        stored = to_stored(pattern)
        while True:
            data, version = await self.store.read(stored)
            current = decode_acls(data)
            wanted = change(current)
            if wanted == current:
                self.table.set(pattern, current)
                return current
            try:
                await self.store.write(stored, encode_acls(wanted) if wanted else None, version)
            except BadVersionError:
                continue
            self.table.set(pattern, wanted)
            return wanted
