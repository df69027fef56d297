"""Dynamic config from ZooKeeper, in Kafka's layout (`/config/<type>/<name>` + `/config/changes`).

A notification (`config_change_<10 digits>`, body v2 `{"entity_path": "brokers/0"}` or v1
`{"entity_type", "entity_name"}`; KIP-55's nested `users/<user>/clients/<id>` arrives as the
users entity `<user>/clients/<id>`) is only a trigger: the entity znode is re-read and its
whole config applied. Notifications are handled in sequence order, each once; after a
reconnect or a new session the child watch is re-read, so the ones written meanwhile are
caught up. Those older than 15 minutes are purged. At start-up every existing entity
config is applied.

A value that does not parse is logged with its key and the previous value of that key
stays in force; the other keys of the same entity still apply.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from broker.zk import layout as L
from broker.zk.client import NoNodeError, ZkClient
from broker.zk.config_entities import CLIENTS, KEYS, USERS, InvalidConfig, validate

log = structlog.get_logger()

PREFIX = "config_change_"
PURGE_AFTER_MS = 15 * 60 * 1000

Handler = Callable[[str, dict[str, str]], Awaitable[None]]


def also(handlers: dict[str, Handler], entity_type: str, handler: Handler) -> dict[str, Handler]:
    """`handlers` with `handler` run too for `entity_type` (after any handler it already has):
    one entity type can feed several owners (users: SCRAM credentials and quotas)."""
    first = handlers.get(entity_type)
    if first is None:
        return {**handlers, entity_type: handler}

    async def both(name: str, config: dict[str, str]) -> None:
        await first(name, config)
        await handler(name, config)
    return {**handlers, entity_type: both}


def parse_notification(data: bytes | None) -> tuple[str, str] | None:
    """(entity_type, entity_name) from a v1 or v2 body; None for anything else."""
    try:
        obj = L.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    if obj.get("version") == 2 and isinstance(obj.get("entity_path"), str):
        etype, _, name = obj["entity_path"].partition("/")
        return (etype, name) if etype and name else None
    if isinstance(obj.get("entity_type"), str) and isinstance(obj.get("entity_name"), str):
        return obj["entity_type"], obj["entity_name"]
    return None


class DynamicConfigManager:
    def __init__(self, zk: ZkClient, handlers: dict[str, Handler], clock: Callable[[], float] = time.time) -> None:
        self.zk = zk
        self.handlers = handlers
        self.clock = clock
        self.last_seq = -1
        self.in_force: dict[tuple[str, str], dict[str, str]] = {}
        self.applied_notifications = 0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        async with self._lock:
            for etype in self.handlers:
                for name in await self._entity_names(etype):
                    await self.apply_entity(etype, name)
            existing = [self._seq(c) for c in await self.zk.get_children(L.CONFIG_CHANGES)]
            self.last_seq = max([s for s in existing if s is not None], default=-1)
        await self.zk.watch_children(L.CONFIG_CHANGES, self._changes)

    async def _entity_names(self, etype: str) -> list[str]:
        """Every entity of a type; for users also `<user>/clients/<id>` (KIP-55's nested entities)."""
        try:
            names = await self.zk.get_children(f"{L.CONFIG_ROOT}/{etype}")
        except NoNodeError:
            return []
        if etype != USERS:
            return names
        nested = []
        for user in names:
            try:
                clients = await self.zk.get_children(f"{L.CONFIG_ROOT}/{etype}/{user}/{CLIENTS}")
            except NoNodeError:
                continue
            nested += [f"{user}/{CLIENTS}/{client}" for client in clients]
        return names + nested

    @staticmethod
    def _seq(child: str) -> int | None:
        if not child.startswith(PREFIX):
            return None
        try:
            return int(child[len(PREFIX):])
        except ValueError:
            return None

    async def _changes(self, children: list[str]) -> None:
        async with self._lock:
            numbered = sorted((s, c) for c in children if (s := self._seq(c)) is not None)
            for seq, child in numbered:
                if seq <= self.last_seq:
                    continue
                path = f"{L.CONFIG_CHANGES}/{child}"
                try:
                    data, _ = await self.zk.get(path)
                except NoNodeError:
                    self.last_seq = seq
                    continue
                entity = parse_notification(data)
                if entity is None:
                    log.warning("config.bad_notification", znode=child)
                elif entity[0] in self.handlers:
                    await self.apply_entity(*entity)
                    self.applied_notifications += 1
                    log.info("config.notification_applied", znode=child, entity_type=entity[0], entity=entity[1])
                self.last_seq = seq
            await self._purge(numbered)

    async def _purge(self, numbered: list[tuple[int, str]]) -> None:
        now_ms = self.clock() * 1000
        for seq, child in numbered:
            if seq > self.last_seq:
                break
            path = f"{L.CONFIG_CHANGES}/{child}"
            try:
                ctime = await self.zk.ctime_ms(path)
                if now_ms - ctime > PURGE_AFTER_MS:
                    await self.zk.delete(path)
            except NoNodeError:
                pass

    async def apply_entity(self, etype: str, name: str) -> None:
        try:
            data, _ = await self.zk.get(f"{L.CONFIG_ROOT}/{etype}/{name}")
            raw = L.decode_entity_config(data)
        except NoNodeError:
            raw = {}
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("config.bad_entity_znode", entity_type=etype, entity=name)
            return
        previous = self.in_force.get((etype, name), {})
        known = KEYS.get(etype, {})
        accepted: dict[str, str] = {}
        for key, value in raw.items():
            if key not in known:
                continue  # Kafka configs this broker does not act on
            try:
                validate(etype, {key: value})
                accepted[key] = value
            except InvalidConfig as e:
                secret = key.startswith("SCRAM-")  # credentials share the user znodes: values never logged
                log.warning("config.invalid_value", entity_type=etype, entity=name, key=key,
                            error=e.why if secret else str(e), kept=None if secret else previous.get(key))
                if key in previous:
                    accepted[key] = previous[key]
        self.in_force[(etype, name)] = accepted
        await self.handlers[etype](name, accepted)
