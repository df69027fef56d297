"""Which ACL each znode is created with: Kafka 2.8's ZkData.defaultAcls, pure.

With `zookeeper.set.acl=true` (a "secure" client) every znode gets ZooKeeper's CREATOR_ALL_ACL
(every permission for the identities the creating connection authenticated as: scheme `auth`,
which the server expands to them) plus READ_ACL_UNSAFE (world may read), except:
- sensitive paths, at or under `/config/users`, `/config/brokers` and `/delegation_token`
  (SCRAM credentials, broker passwords, tokens), are CREATOR_ALL only: not even readable;
- `/consumers` itself stays open to the world (the old consumers write under it).
Without it, or for a client that is not secure, every znode is open (OPEN_ACL_UNSAFE).

Paths are those the client names, below any chroot, as Kafka's KafkaZkClient passes them
(`startsWith` on the root, as Kafka does: `/config/usersfoo` counts as sensitive too).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.zk import layout as L

# ZooKeeper's ZooDefs.Perms.
READ = 1
WRITE = 2
CREATE = 4
DELETE = 8
ADMIN = 16
ALL = READ | WRITE | CREATE | DELETE | ADMIN


@dataclass(frozen=True)
class ZnodeAcl:
    perms: int
    scheme: str
    id: str


# ZooDefs.Ids.
CREATOR_ALL = ZnodeAcl(ALL, "auth", "")
WORLD_READ = ZnodeAcl(READ, "world", "anyone")
WORLD_ALL = ZnodeAcl(ALL, "world", "anyone")

OPEN: tuple[ZnodeAcl, ...] = (WORLD_ALL,)

DELEGATION_TOKENS = "/delegation_token/tokens"
# ZkData.SensitiveRootPaths.
SENSITIVE_ROOTS = (f"{L.CONFIG_ROOT}/users", f"{L.CONFIG_ROOT}/brokers", DELEGATION_TOKENS)

# ZkData.SecureRootPaths: the trees Kafka's zookeeper-security-migration walks (AdminZNode,
# BrokersZNode, ClusterZNode, ConfigZNode, ControllerZNode, ControllerEpochZNode,
# IsrChangeNotificationZNode, ProducerIdBlockZNode, LogDirEventNotificationZNode,
# DelegationTokenAuthZNode, ExtendedAclZNode, then ZkAclStore.securePaths).
SECURE_ROOTS = ("/admin", "/brokers", "/cluster", L.CONFIG_ROOT, L.CONTROLLER, L.CONTROLLER_EPOCH, L.ISR_CHANGE,
                L.PRODUCER_ID_BLOCK, L.LOG_DIR_EVENT, "/delegation_token", "/kafka-acl-extended",
                "/kafka-acl", "/kafka-acl-changes", "/kafka-acl-extended-changes")


def is_sensitive(path: str) -> bool:
    """ZkData.sensitivePath."""
    return any(path.startswith(root) for root in SENSITIVE_ROOTS)


def default_acls(path: str, secure: bool) -> tuple[ZnodeAcl, ...]:
    """ZkData.defaultAcls(isSecure, path)."""
    if not secure or path == L.CONSUMERS:
        return OPEN
    if is_sensitive(path):
        return (CREATOR_ALL,)
    return (CREATOR_ALL, WORLD_READ)
