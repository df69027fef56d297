"""Client quota entities for DescribeClientQuotas and AlterClientQuotas (Kafka 2.8's ZkAdminManager).

Entities are `user`, `client-id` or both; a null name is the `<default>` entity. They live where
`minibroker configs` writes them: `/config/users/<user>`, `/config/users/<user>/clients/<id>`,
`/config/clients/<id>` (names sanitized as Kafka's Sanitizer; `<default>` as is), and are
written through broker.zk.config_writer.alter_entity (validate, entity znode, change
notification), so the brokers apply an alteration through their config watch.

Describe follows ZkAdminManager.handleDescribeClientQuotas: a filter component matches a name
exactly (match type 0), the default entity (1) or any name (2); with `strict`, entities with a
part no component names are left out. Only the quota keys are shown (never the SCRAM credentials
stored in the same user znodes), as doubles.

Alter follows ZkAdminManager.alterClientQuotas: per entry, the ops are applied to the entity's
znode in order (remove, else set; the byte rates must be whole numbers and are stored as such,
the mutation rate as Java prints a double), then written unless validate_only; an entry that
fails gets INVALID_REQUEST with Kafka's message and writes nothing; the other entries go ahead.

Departures: IP entities (KIP-612's connection-rate quotas) are not served: an IP filter describes
nothing and altering one is INVALID_REQUEST. `request_percentage` (request-time quotas) is shown
if present but not accepted, like any key this broker does not enforce; the byte rates must be
at least 1 (as `minibroker configs` requires); names of `.` or `..` or longer than 8192
characters as znode names are INVALID_REQUEST (ZooKeeper refuses the first, and the second
could exceed its packet limit).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from broker.apis.admin import AdminError
from broker.zk.client import BadVersionError, NoNodeError, ZkClient
from broker.zk.config_entities import (
    CLIENT_KEYS,
    CLIENTS,
    CONSUMER_BYTE_RATE,
    DEFAULT_ENTITY,
    PRODUCER_BYTE_RATE,
    USERS,
    InvalidConfig,
    desanitize,
    sanitize,
    validate,
)
from broker.zk.config_writer import alter_entity, entity_path, read_entity
from protocol.errors import ErrorCode

USER, CLIENT_ID, IP = "user", "client-id", "ip"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# QuotaConfigs.isClientOrUserQuotaConfig: what Describe shows of an entity znode.
SHOWN_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, "request_percentage", "controller_mutation_rate")
LONG_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
# A request's names become ZooKeeper paths: one past ZooKeeper's packet limit (jute.maxbuffer, 1 MB)
# would cost the broker its session, so names are bounded (Kafka 2.8 has no bound).
MAX_ZNODE_NAME = 8192
_WRITES = asyncio.Lock()


class _Any:
    """Match type 2: any specified name (Kafka's ClientQuotaFilterComponent.ofEntityType)."""


ANY = _Any()
ABSENT = _Any()  # an entity without that part (a user entity has no client id)

Name = str | None  # None: the <default> entity
Match = Name | _Any
EntityParts = tuple[Name | _Any, Name | _Any]  # (user, client id), each ABSENT or a name


def _invalid(message: str) -> AdminError:
    return AdminError(ErrorCode.INVALID_REQUEST, message)


@dataclass(frozen=True)
class QuotaFilter:
    """A DescribeClientQuotas filter: the match of each named entity type."""

    components: dict[str, Match]
    strict: bool

    @classmethod
    def of(cls, components: Iterable[dict[str, Any]], strict: bool) -> QuotaFilter:
        """Raises AdminError as Kafka's describeClientQuotas and the request's filter parsing do."""
        out: dict[str, Match] = {}
        for c in components:
            etype, match_type, match = c["entity_type"], c["match_type"], c["match"]
            if match_type == MATCH_EXACT:
                if match is None:
                    raise _invalid(f"Null match for an exact {etype} filter component")
                value: Match = match
            elif match_type == MATCH_DEFAULT:
                value = None
            elif match_type == MATCH_SPECIFIED:
                value = ANY
            else:
                raise _invalid(f"Unexpected match type: {match_type}")
            if etype in (USER, CLIENT_ID, IP):
                if etype in out:
                    raise _invalid(f"Duplicate {'client' if etype == CLIENT_ID else etype} filter component "
                                   "entity type")
            elif etype == "":
                raise _invalid("Unexpected empty filter component entity type")
            else:
                raise AdminError(ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{etype}' not supported")
            out[etype] = value
        if IP in out and (USER in out or CLIENT_ID in out):
            raise _invalid("Invalid entity filter component combination, IP filter component should not be "
                           "used with user or clientId filter component.")
        return cls(out, strict)

    def exact(self, etype: str) -> bool:
        return etype in self.components and not isinstance(self.components[etype], _Any)

    def excluded(self, etype: str) -> bool:
        return self.strict and etype not in self.components

    def matches(self, etype: str, name: Name | _Any) -> bool:
        if etype not in self.components:
            return name is ABSENT or not self.strict
        want = self.components[etype]
        if want is ANY:
            return name is not ABSENT
        return name is not ABSENT and name == want


def _znode(name: Name) -> str:
    if name in (".", ".."):  # kept by Kafka's Sanitizer, refused by ZooKeeper as a path segment
        raise _invalid(f"Invalid entity name {name!r}")
    znode = DEFAULT_ENTITY if name is None else sanitize(name)
    if len(znode) > MAX_ZNODE_NAME:
        raise _invalid(f"Entity name of {len(znode)} characters (as a znode name) is longer than {MAX_ZNODE_NAME}")
    return znode


def _name(znode: str) -> Name:
    return None if znode == DEFAULT_ENTITY else desanitize(znode)


def shown(config: dict[str, str]) -> dict[str, float]:
    out = {}
    for key in SHOWN_KEYS:
        if key in config:
            try:
                out[key] = float(config[key])
            except ValueError:
                continue  # the brokers refuse it too (config.invalid_value); nothing to show
    return out


async def _children(zk: ZkClient, path: str) -> list[str]:
    try:
        return await zk.get_children(path)
    except NoNodeError:
        return []


async def describe(zk: ZkClient, f: QuotaFilter) -> list[tuple[list[tuple[str, Name]], dict[str, float]]]:
    """(entity as [(type, name)], quota values) of every entity the filter matches."""
    if IP in f.components:
        return []  # no IP quotas are served (see the module's departures)
    user = f.components.get(USER, ANY)
    client = f.components.get(CLIENT_ID, ANY)
    found: dict[EntityParts, dict[str, str]] = {}
    if f.exact(USER) and f.excluded(CLIENT_ID):
        assert not isinstance(user, _Any)
        found[(user, ABSENT)] = (await read_entity(zk, USERS, _znode(user)))[0]
    elif not f.excluded(USER) and not f.exact(CLIENT_ID):
        for znode in await _children(zk, entity_path(USERS, "").rstrip("/")):
            found[(_name(znode), ABSENT)] = (await read_entity(zk, USERS, znode))[0]
    if f.excluded(USER) and f.exact(CLIENT_ID):
        assert not isinstance(client, _Any)
        found[(ABSENT, client)] = (await read_entity(zk, CLIENTS, _znode(client)))[0]
    elif not f.exact(USER) and not f.excluded(CLIENT_ID):
        for znode in await _children(zk, entity_path(CLIENTS, "").rstrip("/")):
            found[(ABSENT, _name(znode))] = (await read_entity(zk, CLIENTS, znode))[0]
    if f.exact(USER) and f.exact(CLIENT_ID):
        assert not isinstance(user, _Any) and not isinstance(client, _Any)
        found[(user, client)] = (await read_entity(zk, USERS, f"{_znode(user)}/{CLIENTS}/{_znode(client)}"))[0]
    elif not f.excluded(USER) and not f.excluded(CLIENT_ID):
        for user_znode in await _children(zk, entity_path(USERS, "").rstrip("/")):
            for client_znode in await _children(zk, f"{entity_path(USERS, user_znode)}/{CLIENTS}"):
                found[(_name(user_znode), _name(client_znode))] = (
                    await read_entity(zk, USERS, f"{user_znode}/{CLIENTS}/{client_znode}"))[0]
    out = []
    for (u, c), config in found.items():
        values = shown(config)
        if values and f.matches(USER, u) and f.matches(CLIENT_ID, c):
            entity: list[tuple[str, Name]] = []
            for etype, name in ((USER, u), (CLIENT_ID, c)):
                if not isinstance(name, _Any):
                    entity.append((etype, name))
            out.append((entity, values))
    return out


def _entity_znode(entity: list[dict[str, Any]]) -> tuple[str, str]:
    """(entity type, znode name) of a request's entity (ZkAdminManager.parseAndSanitizeQuotaEntity)."""
    if not entity:
        raise _invalid("Invalid empty client quota entity")
    parts: dict[str, Name] = {}
    for e in entity:
        etype, name = e["entity_type"], e["entity_name"]
        if etype not in (USER, CLIENT_ID, IP):
            raise _invalid(f"Unhandled client quota entity type: {etype}")
        if name == "":
            raise _invalid(f"Empty {etype} not supported")
        parts[etype] = name
    if IP in parts:
        if len(parts) > 1:
            raise _invalid("Invalid quota entity combination, IP entity should not be used with user/client ID entity.")
        raise _invalid("IP quotas are not served by this broker")
    if USER in parts and CLIENT_ID in parts:
        return USERS, f"{_znode(parts[USER])}/{CLIENTS}/{_znode(parts[CLIENT_ID])}"
    if USER in parts:
        return USERS, _znode(parts[USER])
    return CLIENTS, _znode(parts[CLIENT_ID])


def _stored(key: str, value: float) -> str:
    """A value as Kafka stores it: a whole number for the LONG byte rates, Java's Double.toString else."""
    if key not in CLIENT_KEYS:
        raise _invalid(f"Invalid configuration key {key}")
    if key in LONG_KEYS:
        whole = int(value + 1e-6) if value == value and abs(value) < 2**63 else None
        if whole is None or abs(whole - value) > 1e-6:
            raise _invalid(f"Configuration {key} must be a LONG value")
        return str(whole)
    return repr(float(value))


async def alter(zk: ZkClient, entity: list[dict[str, Any]], ops: list[dict[str, Any]], validate_only: bool) -> None:
    """One entry: raises AdminError (nothing written) when refused."""
    etype, znode = _entity_znode(entity)
    adds: dict[str, str] = {}
    deletes: list[str] = []
    for op in ops:
        key = op["key"]
        if op["remove"]:
            adds.pop(key, None)
            deletes.append(key)
        else:
            adds[key] = _stored(key, op["value"])
            if key in deletes:
                deletes.remove(key)
    try:
        validate(etype, adds)
    except InvalidConfig as e:
        raise _invalid(str(e)) from None
    if validate_only:
        return
    # Kafka sets the znode unconditionally; alter_entity's set is conditional, so this broker's own
    # writers take turns and another writer (another broker, the tool) costs a read and a retry.
    async with _WRITES:
        for _ in range(5):
            try:
                await alter_entity(zk, etype, znode, adds, deletes, force=True)
                return
            except (BadVersionError, InvalidConfig):  # validated above: only a concurrent create is left
                continue
    raise AdminError(ErrorCode.REQUEST_TIMED_OUT, f"{etype}/{znode} kept changing")
