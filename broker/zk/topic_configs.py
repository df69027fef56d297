"""Topic configs as this broker knows them (`/config/topics/<topic>`).

Dynamic-config notifications keep the cache current; a topic not heard of yet is read
from its znode once, when this broker is first given one of its partitions.
"""

from __future__ import annotations

import structlog

from broker.zk import layout as L
from broker.zk.client import NoNodeError, ZkClient

log = structlog.get_logger()


class TopicConfigs:
    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self._configs: dict[str, dict[str, str]] = {}

    def set(self, topic: str, config: dict[str, str]) -> None:
        self._configs[topic] = config

    def forget(self, topic: str) -> None:
        """The topic's last partition here was deleted: read afresh should the name come back."""
        self._configs.pop(topic, None)

    def cached(self, topic: str) -> dict[str, str] | None:
        """The topic's configs if known here (no ZooKeeper read); None otherwise."""
        return self._configs.get(topic)

    async def get(self, topic: str) -> dict[str, str]:
        cfg = self._configs.get(topic)
        if cfg is None:
            try:
                data, _ = await self.zk.get(f"/config/topics/{topic}")
                cfg = L.decode_entity_config(data)
            except NoNodeError:
                cfg = {}
            except Exception:
                log.warning("topic.bad_config_znode", topic=topic)
                cfg = {}
            self._configs[topic] = cfg
        return cfg


def topic_int(topic: str, cfg: dict[str, str], key: str, default: int) -> int:
    """An integer topic config, or `default` (with a warning when the value does not parse)."""
    try:
        return int(cfg.get(key, default))
    except ValueError:
        log.warning("topic.bad_config", topic=topic, key=key)
        return default
