"""Writing dynamic config the way kafka-configs.sh --zookeeper does: entity znode, then notification.

Shared by `minibroker configs` and `minibroker reassign` (which sets and removes throttles),
so both validate the same way and never write a value a broker would refuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from broker.zk import layout as L
from broker.zk.client import BadVersionError, NodeExistsError, NoNodeError, ZkClient
from broker.zk.config_entities import InvalidConfig, validate


def entity_path(entity_type: str, znode_name: str) -> str:
    return f"{L.CONFIG_ROOT}/{entity_type}/{znode_name}"


async def read_entity(zk: ZkClient, entity_type: str, znode_name: str) -> tuple[dict[str, str], int]:
    """The entity's config and znode version (-1 when it has no znode)."""
    try:
        data, version = await zk.get(entity_path(entity_type, znode_name))
    except NoNodeError:
        return {}, -1
    return L.decode_entity_config(data), version


CONFLICT_RETRIES = 10


async def alter_entity(zk: ZkClient, entity_type: str, znode_name: str, adds: Mapping[str, str],
                       deletes: Iterable[str] = (), force: bool = False) -> bool:
    """Merges `adds`, drops `deletes`; validates, writes, notifies. False when nothing changed
    (and then nothing is written, unless `force`, as kafka-configs always writes).

    Raises InvalidConfig (nothing written) for a bad key or value. The merge is made on the znode as
    read and written with a conditional set; another writer in between (a set, a create, a delete)
    costs a fresh read and another try (Kafka sets unconditionally), a few times before InvalidConfig.
    """
    validate(entity_type, dict(adds))
    drop = set(deletes)
    path = entity_path(entity_type, znode_name)
    for _ in range(CONFLICT_RETRIES):
        current, version = await read_entity(zk, entity_type, znode_name)
        merged = {k: v for k, v in current.items() if k not in drop}
        merged.update(adds)
        if merged == current and not force:
            return False
        body = L.encode_entity_config(merged)
        try:
            if version < 0:
                await zk.create(path, body, make_parents=True)
            else:
                await zk.set(path, body, version=version)
            break
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue
    else:
        raise InvalidConfig(path, "", "kept changing concurrently; run the command again")
    await zk.ensure_path(L.CONFIG_CHANGES)
    await zk.create(f"{L.CONFIG_CHANGES}/config_change_",
                    L.dumps({"version": 2, "entity_path": f"{entity_type}/{znode_name}"}), sequential=True)
    return True
