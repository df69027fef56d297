"""ACL znodes in Kafka 2.8's layout (kafka.zk.ZkAclStore, ZkAclChangeStore), bytes in and out.

LITERAL patterns live at `/kafka-acl/<ResourceType>/<name>`, every other pattern type at
`/kafka-acl-extended/<pattern type, lower case>/<ResourceType>/<name>` (PREFIXED:
`/kafka-acl-extended/prefixed/...`). A change to a LITERAL resource is announced by a sequential
`/kafka-acl-changes/acl_changes_<seq>` holding `<ResourceType>:<name>`; to any other by
`/kafka-acl-extended-changes/acl_changes_<seq>` holding
`{"version":1,"resourceType":..,"name":..,"patternType":..}`. Writes are conditional on the
znode's zkVersion (read, change, set at that version; retried by the caller on BadVersion), as
AclAuthorizer.updateResourceAcls. The JSON body is broker.security.acl's; this module does not
look inside it. Resource types and pattern types are passed as Kafka's PascalCase / UPPER names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker.zk.client import BadVersionError, NodeExistsError, NoNodeError, Watch, ZkClient

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's ZkNodeChangeNotificationListener.changeExpirationMs
# The roots Kafka creates at start (ZkData.PersistentZkPaths through ZkAclStore.securePaths).
PERSISTENT_PATHS = (LITERAL_ROOT, LITERAL_CHANGES, f"{EXTENDED_ROOT}/prefixed", EXTENDED_CHANGES)


@dataclass(frozen=True, order=True)
class StoredPattern:
    resource_type: str  # PascalCase: Topic, Group, Cluster, TransactionalId
    name: str
    pattern_type: str  # LITERAL, PREFIXED


def root(pattern_type: str) -> str:
    return LITERAL_ROOT if pattern_type == "LITERAL" else f"{EXTENDED_ROOT}/{pattern_type.lower()}"


def resource_path(p: StoredPattern) -> str:
    return f"{root(p.pattern_type)}/{p.resource_type}/{p.name}"


def encode_change(p: StoredPattern) -> tuple[str, bytes]:
    """The notification's parent and body (LiteralAclChangeStore / ExtendedAclChangeStore.encode)."""
    if p.pattern_type == "LITERAL":
        return LITERAL_CHANGES, f"{p.resource_type}:{p.name}".encode()
    return EXTENDED_CHANGES, json.dumps({"version": 1, "resourceType": p.resource_type, "name": p.name,
                                         "patternType": p.pattern_type}, separators=(",", ":")).encode()


def decode_change(parent: str, data: bytes) -> StoredPattern:
    if parent == LITERAL_CHANGES:
        kind, sep, name = data.decode().partition(":")
        if not sep:
            raise ValueError(f"bad ACL change notification {data!r}")
        return StoredPattern(kind, name, "LITERAL")
    doc = json.loads(data)
    return StoredPattern(doc["resourceType"], doc["name"], doc["patternType"])


class AclStore:
    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    async def ensure_paths(self) -> None:
        for path in PERSISTENT_PATHS:
            await self.zk.ensure_path(path)

    async def read(self, p: StoredPattern) -> tuple[bytes | None, int]:
        """The resource's body and zkVersion; (None, -1) when it has no znode."""
        try:
            data, version = await self.zk.get(resource_path(p))
        except NoNodeError:
            return None, -1
        return data, version

    async def read_all(self) -> dict[StoredPattern, bytes]:
        """Every stored resource (AclAuthorizer.loadCache)."""
        out: dict[StoredPattern, bytes] = {}
        for pattern_type, base in (("LITERAL", LITERAL_ROOT), ("PREFIXED", f"{EXTENDED_ROOT}/prefixed")):
            try:
                kinds = await self.zk.get_children(base)
            except NoNodeError:
                continue
            for kind in kinds:
                try:
                    names = await self.zk.get_children(f"{base}/{kind}")
                except NoNodeError:
                    continue
                for name in names:
                    p = StoredPattern(kind, name, pattern_type)
                    data, _ = await self.read(p)
                    if data:
                        out[p] = data
        return out

    async def write(self, p: StoredPattern, data: bytes | None, version: int) -> None:
        """Conditional write at `version` (-1: the znode must not exist); None deletes the znode.

        Raises BadVersionError when someone changed the resource meanwhile (the caller re-reads),
        then announces the change."""
        path = resource_path(p)
        if data is None:
            if version >= 0:
                try:
                    await self.zk.delete(path, version)
                except NoNodeError:
                    raise BadVersionError(path) from None
        elif version < 0:
            try:
                await self.zk.create(path, data, make_parents=True)
            except NodeExistsError:
                raise BadVersionError(path) from None
        else:
            try:
                await self.zk.set(path, data, version)
            except NoNodeError:
                raise BadVersionError(path) from None
        parent, body = encode_change(p)
        await self.zk.create(f"{parent}/{CHANGE_PREFIX}", body, sequential=True, make_parents=True)

    async def watch_changes(self, on_change: Callable[[StoredPattern], Awaitable[None]]) -> list[Watch]:
        """Calls `on_change` for every notification created after the watch began
        (ZkNodeChangeNotificationListener: sequence numbers above the last one processed)."""
        watches = []
        for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
            follower = _ChangeFollower(self.zk, parent, on_change)
            await follower(await self.zk.get_children(parent))  # the starting point, before any load
            watches.append(await self.zk.watch_children(parent, follower))
        return watches


class _ChangeFollower:
    """The children watch's callback: processes new sequence numbers once, in order, then deletes
    notifications older than CHANGE_EXPIRATION_MS (ZkNodeChangeNotificationListener's purge; any
    broker may do it, and a broker that was away that long reloads nothing it missed: the
    resources themselves are re-read at its next start)."""

    def __init__(self, zk: ZkClient, parent: str, on_change: Callable[[StoredPattern], Awaitable[None]]) -> None:
        self.zk = zk
        self.parent = parent
        self.on_change = on_change
        self.last_seq: int | None = None  # None: the first listing only sets the starting point

    async def __call__(self, children: list[str]) -> None:
        seqs = sorted(int(c[len(CHANGE_PREFIX):]) for c in children
                      if c.startswith(CHANGE_PREFIX) and c[len(CHANGE_PREFIX):].isdigit())
        if self.last_seq is None:
            self.last_seq = seqs[-1] if seqs else -1
            return
        for seq in seqs:
            if seq <= self.last_seq:
                continue
            try:
                data, _ = await self.zk.get(f"{self.parent}/{CHANGE_PREFIX}{seq:010d}")
                pattern = decode_change(self.parent, data)
            except NoNodeError:
                pattern = None
            self.last_seq = seq
            if pattern is not None:
                await self.on_change(pattern)
        await self._purge(seqs)

    async def _purge(self, seqs: list[int]) -> None:
        # Oldest first; sequence order is creation order, so the first young one ends the pass.
        horizon = time.time() * 1000 - CHANGE_EXPIRATION_MS
        for seq in seqs:
            path = f"{self.parent}/{CHANGE_PREFIX}{seq:010d}"
            try:
                if await self.zk.ctime_ms(path) > horizon:
                    return
                await self.zk.delete(path)
            except NoNodeError:
                continue  # another broker purged it first
