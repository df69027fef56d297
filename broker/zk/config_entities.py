"""Dynamic config entities (`/config/<type>/<name>`): which keys each serves and how values parse.

Shared by the broker's dynamic config manager and by `minibroker configs`, so a value the
tool accepts is exactly a value the broker applies, and a bad value is refused by both
with a message that names the key.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from urllib.parse import quote, unquote

from broker.zk.scram_credentials import HASHES as SCRAM_MECHANISMS
from broker.zk.scram_credentials import ScramCredential
from quotas.replication import ALL_PARTITIONS as ALL

BROKERS, TOPICS, CLIENTS, USERS = "brokers", "topics", "clients", "users"
ENTITY_TYPES = (BROKERS, TOPICS, CLIENTS, USERS)
DEFAULT_ENTITY = "<default>"

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Dynamic in Kafka 2.8 too (LogCleaner.ReconfigurableConfigs); the broker's cleaner applies it live.
CLEANER_IO_RATE = "log.cleaner.io.max.bytes.per.second"

_REPLICA_ENTRY = re.compile(r"^([0-9]+:[0-9]+)?$")


class InvalidConfig(ValueError):
    def __init__(self, key: str, value: str, why: str) -> None:
        super().__init__(f"Invalid value {value!r} for configuration {key}: {why}")
        self.key = key
        self.why = why


class UnknownConfig(InvalidConfig):
    """A key the entity type does not serve (Kafka: "Unknown topic config name"), as opposed to a bad value."""


def _long(key: str, value: str, minimum: int = 0) -> int:
    try:
        v = int(value.strip())
    except ValueError:
        raise InvalidConfig(key, value, "not a whole number") from None
    if v < minimum:
        raise InvalidConfig(key, value, f"must be at least {minimum}")
    return v


def _double(key: str, value: str) -> float:
    try:
        v = float(value.strip())
    except ValueError:
        raise InvalidConfig(key, value, "not a number") from None
    if v != v or v < 0 or v == float("inf"):
        raise InvalidConfig(key, value, "must be a finite number >= 0")
    return v


def _replica_list(key: str, value: str) -> str:
    v = value.strip()
    if v == "*" or v == "":
        return v
    for entry in v.split(","):
        if not _REPLICA_ENTRY.match(entry.strip()):
            raise InvalidConfig(key, value, "expected * or a list of partitionId:brokerId")
    return v


def _topic_int(minimum: int, maximum: int = (1 << 63) - 1) -> Callable[[str, str], int]:
    def check(key: str, value: str) -> int:
        v = _long(key, value, minimum)
        if v > maximum:
            raise InvalidConfig(key, value, f"must be at most {maximum}")
        return v
    return check


def _ratio(key: str, value: str) -> float:
    v = _double(key, value)
    if v > 1:
        raise InvalidConfig(key, value, "must be between 0 and 1")
    return v


CLEANUP_POLICIES = ("delete", "compact")


def cleanup_policy(key: str, value: str) -> str:
    """`cleanup.policy` / `log.cleanup.policy`: Kafka's ValidList.in(compact, delete), a comma-separated
    list (`delete`, `compact`, `compact,delete`); returned normalised (items stripped)."""
    items = [v.strip() for v in value.split(",")]
    if any(not v for v in items):
        raise InvalidConfig(key, value, "expected a comma-separated list of delete, compact")
    for v in items:
        if v not in CLEANUP_POLICIES:
            raise InvalidConfig(key, value, f"unknown cleanup policy {v!r}; expected delete, compact "
                                            "or compact,delete")
    return ",".join(items)


def cleanup_includes_delete(value: str) -> bool:
    """Whether a (validated) cleanup policy lets retention delete segments (Kafka's LogConfig.delete)."""
    return "delete" in (v.strip() for v in value.split(","))


def _one_of(*allowed: str) -> Callable[[str, str], str]:
    def check(key: str, value: str) -> str:
        if value not in allowed:
            raise InvalidConfig(key, value, f"expected one of {', '.join(allowed)}")
        return value
    return check


# A key's parser: (key, value) -> the parsed value; raises InvalidConfig.
Check = Callable[[str, str], object]

TOPIC_KEYS: dict[str, Check] = {
    LEADER_REPLICAS: _replica_list,
    FOLLOWER_REPLICAS: _replica_list,
    "min.insync.replicas": _topic_int(1),
    "segment.bytes": _topic_int(14, (1 << 31) - 1),
    # Retention (issue 17): -1 is unlimited; anything below it is refused (Kafka 2.8 accepts any
    # retention.bytes, but issue 17 asks negative values to be refused).
    "retention.ms": _topic_int(-1),
    "retention.bytes": _topic_int(-1),
    "segment.ms": _topic_int(1),
    "file.delete.delay.ms": _topic_int(0),
    "cleanup.policy": cleanup_policy,
    "max.message.bytes": _topic_int(0),
    # Produce's validation (protocol.records.validator) reads these two.
    "message.timestamp.type": _one_of("CreateTime", "LogAppendTime"),
    "message.timestamp.difference.max.ms": _topic_int(0),
    # Produce recompresses batches to it unless it is `producer` (protocol.records.validator).
    "compression.type": _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    # The log cleaner (broker.log.cleaner) reads these, and cleanup.policy.
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _topic_int(0),
    "max.compaction.lag.ms": _topic_int(1),
    "delete.retention.ms": _topic_int(0),
}
BROKER_KEYS: dict[str, Check] = {LEADER_RATE: _long, FOLLOWER_RATE: _long, CLEANER_IO_RATE: _double}
CLIENT_KEYS: dict[str, Check] = {PRODUCER_BYTE_RATE: lambda k, v: _long(k, v, 1), CONSUMER_BYTE_RATE: lambda k, v: _long(k, v, 1),
               CONTROLLER_MUTATION_RATE: _double}


def _scram_credential(key: str, value: str) -> ScramCredential:
    """A stored SCRAM credential (broker.zk.scram_credentials); the refusal never repeats the value."""
    try:
        return ScramCredential.from_config(value)
    except ValueError as e:
        raise InvalidConfig(key, "[hidden]", str(e)) from None


USER_KEYS: dict[str, Check] = {mechanism: _scram_credential for mechanism in SCRAM_MECHANISMS}
# Quota keys of /config/users/<user>[/clients/<id>] (KIP-55). The same znodes hold SCRAM
# credentials (SCRAM-SHA-256/512), which the quota side neither reads nor logs.
USER_QUOTA_KEYS = CLIENT_KEYS
# The users entity serves both: SCRAM credentials (broker.zk.scram_credentials) and the quota keys.
KEYS: dict[str, dict[str, Check]] = {TOPICS: TOPIC_KEYS, BROKERS: BROKER_KEYS, CLIENTS: CLIENT_KEYS, USERS: {**USER_KEYS, **USER_QUOTA_KEYS}}


def sanitize(entity_name: str) -> str:
    """Kafka's Sanitizer: a user or client id as a znode name (Java's URLEncoder, then `*` as %2A
    and space as %20: only letters, digits and `.-_` stay as they are; `~` becomes %7E)."""
    return quote(entity_name, safe="").replace("~", "%7E")


@lru_cache(maxsize=4096)
def quota_user(principal: str) -> str:
    """The user a request's quotas are looked up by: the principal's name (`User:alice` -> alice),
    sanitized as in the /config/users znode names and Kafka's `user` metric tag."""
    return sanitize(principal.partition(":")[2])


def desanitize(znode_name: str) -> str:
    return unquote(znode_name)


def validate(entity_type: str, config: dict[str, str]) -> dict[str, object]:
    """Parse every key; raise InvalidConfig naming the first bad key or value."""
    known = KEYS[entity_type]
    out: dict[str, object] = {}
    for key, value in config.items():
        check = known.get(key)
        if check is None:
            raise UnknownConfig(key, value, f"unknown {entity_type} config")
        out[key] = check(key, value)
    return out


def throttled_partitions(value: str | None, broker_id: int) -> frozenset[int] | None:
    """Kafka's ConfigHandler parse of a throttled-replica list, filtered on this broker.

    None when nothing is throttled; ALL for `*`; else the partition ids whose entry names
    `broker_id`.
    """
    if value is None:
        return None
    v = value.strip()
    if v == "":
        return None
    if v == "*":
        return ALL
    parts: set[int] = set()
    for entry in v.split(","):
        entry = entry.strip()
        if not entry:
            continue
        p, _, b = entry.partition(":")
        if int(b) == broker_id:
            parts.add(int(p))
    return frozenset(parts)


def split_config_list(spec: str) -> dict[str, str]:
    """`k=v,k2=[a,b]`: commas inside square brackets belong to the value; brackets are removed."""
    out: dict[str, str] = {}
    depth = 0
    item = ""
    items: list[str] = []
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    for raw in items:
        if not raw.strip():
            continue
        key, sep, value = raw.partition("=")
        if not sep or not key.strip():
            raise InvalidConfig(raw.strip(), "", "expected key=value")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out
