"""`server.properties` with Kafka's names and defaults.

Unknown keys are logged and ignored; a malformed value stops start-up with a message that
names the key (Kafka's KafkaConfig does the same).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

from broker.config_env import properties_from_env
from broker.log.page_cache import DEFAULT_WINDOW_BYTES as DEFAULT_PAGE_CACHE_WINDOW
from broker.security.acl import AUTHORIZER_NAMES, parse_super_users
from broker.security.sasl_listeners import SaslConfigError, SaslListeners, inter_broker_sasl
from broker.security.sasl_scram import CredentialCache
from broker.security.ssl_settings import SslSettingsError, listener_ssl_settings
from broker.zk import jaas
from broker.zk.config_entities import InvalidConfig, cleanup_policy

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
SHORT_MAX = (1 << 15) - 1
DOUBLE_MAX = 1.7976931348623157e308


class ConfigError(ValueError):
    def __init__(self, key: str, value: str, why: str) -> None:
        super().__init__(f"invalid value {value!r} for configuration {key}: {why}")
        self.key = key
        self.why = why


def _int(key: str, raw: str, minimum: int | None = None, maximum: int | None = None) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(key, raw, "not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(key, raw, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(key, raw, f"must be <= {maximum}")
    return value


def _double(key: str, raw: str, minimum: float = 0.0, maximum: float | None = None) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(key, raw, "not a number") from None
    if value != value or value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(key, raw, f"must be in [{minimum}, {maximum if maximum is not None else 'inf'}]")
    return value


def _bool(key: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ConfigError(key, raw, "expected true or false")


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listeners(key: str, raw: str) -> list[Listener]:
    out: list[Listener] = []
    for item in (s.strip() for s in raw.split(",")):
        if not item:
            continue
        if "://" not in item:
            raise ConfigError(key, raw, "expected NAME://host:port")
        name, rest = item.split("://", 1)
        host, sep, port = rest.rpartition(":")
        if not sep:
            raise ConfigError(key, raw, "missing port")
        host = host.strip("[]")
        try:
            port_i = int(port)
        except ValueError:
            raise ConfigError(key, raw, "port is not a number") from None
        if not 0 <= port_i <= 65535:
            raise ConfigError(key, raw, "port out of range")
        out.append(Listener(name.upper(), host, port_i))
    if not out:
        raise ConfigError(key, raw, "no listener")
    return out


# Kafka 2.8's default listener.security.protocol.map: each protocol under its own name.
DEFAULT_PROTOCOL_MAP = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                        "SASL_SSL": "SASL_SSL"}
SECURITY_PROTOCOLS = frozenset(DEFAULT_PROTOCOL_MAP.values())
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})

# The per-listener SSL keys (PEM stores, KIP-651, or PKCS12); each may also be given as
# `listener.name.<lowercase listener name>.<key>`, which wins (Kafka's rule).
SSL_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.certificates", "ssl.truststore.password", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.principal.mapping.rules", "ssl.endpoint.identification.algorithm",
})
LISTENER_PREFIX = "listener.name."
# Per-listener SASL keys without the `sasl.` prefix (broker/security/sasl_listeners.py reads them).
SASL_LISTENER_KEYS = frozenset({"connections.max.reauth.ms", "connection.failed.authentication.delay.ms"})


def is_security_key(key: str) -> bool:
    """SSL and SASL keys, bare or per listener: read through `BrokerConfig.listener_setting`, not _PARSERS.

    SASL keys (`sasl.*`, `listener.name.<l>.<mechanism>.sasl.jaas.config`…) are the SASL part's to check."""
    rest = key
    if key.startswith(LISTENER_PREFIX):
        _, _, rest = key[len(LISTENER_PREFIX):].partition(".")
    return rest in SSL_KEYS or rest in SASL_LISTENER_KEYS or rest.startswith("sasl.") or ".sasl." in rest


def parse_protocol_map(key: str, raw: str) -> dict[str, str]:
    """`INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT` (listener name → security protocol)."""
    out: dict[str, str] = {}
    for item in (s.strip() for s in raw.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip():
            raise ConfigError(key, raw, "expected LISTENER_NAME:SECURITY_PROTOCOL")
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(key, raw, f"unknown security protocol {proto!r}")
        out[name.strip().upper()] = proto
    if not out:
        raise ConfigError(key, raw, "empty")
    return out


def parse_connection_overrides(key: str, raw: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: `hostName:100,127.0.0.1:200` (Kafka's form)."""
    out: dict[str, int] = {}
    for item in (s.strip() for s in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ConfigError(key, raw, "expected host:count")
        out[host.strip("[]")] = _int(key, count, 0)
    return out


def parse_quota_overrides(key: str, raw: str) -> dict[str, int]:
    """KIP-13's `clientA:4M,clientB:10M` form; K/M/G are powers of 1024."""
    out: dict[str, int] = {}
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    for item in (s.strip() for s in raw.split(",")):
        if not item:
            continue
        client, sep, rate = item.rpartition(":")
        if not sep or not rate:
            raise ConfigError(key, raw, "expected clientId:rate")
        factor = mult.get(rate[-1].upper(), 1)
        digits = rate[:-1] if rate[-1].upper() in mult else rate
        out[client] = _int(key, digits, 0) * factor
    return out


@dataclass
class BrokerConfig:
    broker_id: int = -1
    listeners: list[Listener] = field(default_factory=lambda: [Listener("PLAINTEXT", "127.0.0.1", 9092)])
    advertised_listeners: list[Listener] | None = None
    listener_security_protocol_map: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PROTOCOL_MAP))
    # Kafka's default: the listener named after security.inter.broker.protocol (PLAINTEXT).
    inter_broker_listener_name: str = "PLAINTEXT"
    # Kafka's older key; only one of the two may be given (it names the listener after the protocol).
    security_inter_broker_protocol: str = "PLAINTEXT"
    log_dirs: list[Path] = field(default_factory=lambda: [Path("/tmp/minibroker-logs")])
    log_segment_bytes: int = 1 << 30
    zookeeper_connect: str = "127.0.0.1:2181"
    zookeeper_session_timeout_ms: int = 6000
    zookeeper_set_acl: bool = False
    # From the JAAS file $KAFKA_OPTS names, as Kafka's (broker/zk/jaas.py); not a key, never shown.
    zookeeper_credentials: jaas.ZkCredentials | None = field(default=None, repr=False)
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    auto_create_topics_enable: bool = True
    unclean_leader_election_enable: bool = False
    socket_request_max_bytes: int = 104857600
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    connections_max_idle_ms: int = 600000
    queued_max_request_bytes: int = -1
    # Project key (a departure: Kafka mutes a channel while one request is in flight): requests
    # read from one connection and not yet answered; 1 is Kafka's own behaviour.
    max_in_flight_requests_per_connection: int = 16
    message_max_bytes: int = 1048588
    replica_lag_time_max_ms: int = 10000
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_response_max_bytes: int = 10485760
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000
    num_replica_fetchers: int = 1
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    quota_producer_default: int = LONG_MAX
    quota_consumer_default: int = LONG_MAX
    quota_producer_override: dict[str, int] = field(default_factory=dict)
    quota_consumer_override: dict[str, int] = field(default_factory=dict)
    controller_quota_window_num: int = 11
    controller_quota_window_size_seconds: int = 1
    controlled_shutdown_enable: bool = True
    # Kafka 2.8's: ControlledShutdown requests sent in all (not retries after the first), and the
    # wait after one that leaves partitions led here or fails (broker.controlled_shutdown).
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    metrics_listener: str | None = None
    # Project key (Kafka has none): segment .log files kept open at once, active ones included;
    # 0 derives it from the soft RLIMIT_NOFILE (three quarters of it). See broker/log/open_files.py.
    log_max_open_segment_files: int = 0
    # Project key (Kafka has none): page cache a segment being written keeps behind its end; older
    # pages are written back and dropped. -1 leaves them to the kernel. See broker/log/page_cache.py.
    log_page_cache_window_bytes: int = DEFAULT_PAGE_CACHE_WINDOW
    replication_throttle_leftover_warn_ms: int = 300000
    # Kafka 2.8 expires a partition's idle producer ids after transactional.id.expiration.ms
    # (LogManager's maxPidExpirationMs); producer.id.expiration.ms only came with Kafka 3.x.
    transactional_id_expiration_ms: int = 604800000
    # Retention (issue 17), KafkaConfig 2.8's keys and defaults. log.retention.ms wins over
    # .minutes, which wins over .hours; a negative result is -1, unlimited.
    log_retention_hours: int = 168
    log_retention_minutes: int | None = None
    log_retention_ms: int | None = None
    log_retention_bytes: int = -1
    # segment.ms's broker synonyms (issue 17 writes `log.segment.ms`; Kafka's names are these).
    log_roll_hours: int = 168
    log_roll_ms: int | None = None
    log_retention_check_interval_ms: int = 300000
    # file.delete.delay.ms's broker synonym.
    log_segment_delete_delay_ms: int = 60000
    log_cleanup_policy: str = "delete"
    # The log cleaner (broker.log.cleaner), Kafka 2.8's keys and defaults.
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_io_max_bytes_per_second: float = DOUBLE_MAX  # Kafka's Double.MaxValue: unthrottled
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_min_compaction_lag_ms: int = 0
    log_cleaner_max_compaction_lag_ms: int = LONG_MAX
    log_cleaner_delete_retention_ms: int = 86400000
    log_cleaner_backoff_ms: int = 15000
    # The group coordinator (issue 18), KafkaConfig 2.8's keys and defaults.
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = INT_MAX
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600000
    # `__consumer_offsets` (issue 18), KafkaConfig 2.8's keys and defaults. The replication factor
    # is lowered to the live brokers' count with a warning when there are fewer (issue 18; Kafka
    # 2.8 refuses to create the topic instead).
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600
    offsets_topic_compression_codec: int = 0
    offsets_load_buffer_size: int = 5242880
    offsets_commit_timeout_ms: int = 5000
    offsets_commit_required_acks: int = -1
    # The ACL authorizer (issue 20), Kafka 2.8's keys: off unless authorizer.class.name names it.
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    unknown_keys: list[str] = field(default_factory=list)
    # SSL and SASL keys as given, bare and `listener.name.<l>.`-prefixed (secrets among them: kept
    # out of `given`, so DescribeConfigs never lists them). Read with `listener_setting`.
    security_props: dict[str, str] = field(default_factory=dict, repr=False)
    # The known keys as given (file and overrides): DescribeConfigs names them STATIC_BROKER_CONFIG.
    given: dict[str, str] = field(default_factory=dict)

    @property
    def log_retention_time_ms(self) -> int:
        """KafkaConfig.logRetentionTimeMillis: ms, else minutes, else hours; negative is -1."""
        if self.log_retention_ms is not None:
            millis = self.log_retention_ms
        elif self.log_retention_minutes is not None:
            millis = self.log_retention_minutes * 60_000
        else:
            millis = self.log_retention_hours * 3_600_000
        return -1 if millis < 0 else millis

    @property
    def log_roll_time_ms(self) -> int:
        """KafkaConfig.logRollTimeMillis: log.roll.ms, else log.roll.hours."""
        return self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * 3_600_000

    @property
    def advertised_endpoints(self) -> list[Listener]:
        """What is registered: advertised.listeners, or else listeners (Kafka's default)."""
        return self.advertised_listeners or self.listeners

    @property
    def advertised(self) -> Listener:
        """The inter-broker endpoint: what other brokers and the controller connect to."""
        for lst in self.advertised_endpoints:
            if lst.name == self.inter_broker_listener_name:
                return lst
        return self.advertised_endpoints[0]

    def listener_protocol(self, listener_name: str) -> str:
        """The security protocol of a named listener (listener.security.protocol.map)."""
        return self.listener_security_protocol_map[listener_name.upper()]

    @property
    def inter_broker_protocol(self) -> str:
        return self.listener_protocol(self.inter_broker_listener_name)

    def listener_setting_key(self, listener_name: str, key: str) -> str:
        """The key that supplies `key` on this listener: the `listener.name.<name>.` one when given."""
        prefixed = f"{LISTENER_PREFIX}{listener_name.lower()}.{key}"
        return prefixed if prefixed in self.security_props else key

    def listener_setting(self, listener_name: str, key: str, default: str | None = None) -> str | None:
        """A per-listener setting: `listener.name.<lowercase name>.<key>`, else `<key>`, else `default`
        (raw text; a bare key that has a parser of its own is read as given)."""
        used = self.listener_setting_key(listener_name, key)
        if used in self.security_props:
            return self.security_props[used]
        return self.given.get(used, default)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        if not self.metrics_listener:
            return None
        parts = urlsplit(self.metrics_listener)
        return parts.hostname or "127.0.0.1", parts.port or 9404


def _authorizer_class(key: str, raw: str) -> str:
    name = raw.strip()
    if name and name not in AUTHORIZER_NAMES:
        raise ConfigError(key, raw, f"the authorizer here is Kafka's AclAuthorizer: one of {sorted(AUTHORIZER_NAMES)}")
    return name


def _super_users(key: str, raw: str) -> str:
    try:
        parse_super_users(raw)
    except ValueError as e:
        raise ConfigError(key, raw, str(e)) from None
    return raw.strip()


def _cleanup_policy(key: str, raw: str) -> str:
    """KafkaConfig's ValidList.in(compact, delete)."""
    try:
        return cleanup_policy(key, raw)
    except InvalidConfig as e:
        raise ConfigError(key, raw, e.why) from None


def _security_protocol(key: str, raw: str) -> str:
    proto = raw.strip().upper()
    if proto not in SECURITY_PROTOCOLS:
        raise ConfigError(key, raw, f"unknown security protocol; one of {sorted(SECURITY_PROTOCOLS)}")
    return proto


def _non_negative(key: str, raw: str) -> int:
    return _int(key, raw, 0)


def _positive(key: str, raw: str) -> int:
    return _int(key, raw, 1)


_PARSERS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "broker.id": ("broker_id", _non_negative),
    "listeners": ("listeners", parse_listeners),
    "advertised.listeners": ("advertised_listeners", parse_listeners),
    "listener.security.protocol.map": ("listener_security_protocol_map", parse_protocol_map),
    "inter.broker.listener.name": ("inter_broker_listener_name", lambda k, v: v.strip().upper()),
    "security.inter.broker.protocol": ("security_inter_broker_protocol", _security_protocol),
    "log.dirs": ("log_dirs", lambda k, v: [Path(p.strip()) for p in v.split(",") if p.strip()]),
    "log.dir": ("log_dirs", lambda k, v: [Path(v.strip())]),
    "log.segment.bytes": ("log_segment_bytes", lambda k, v: _int(k, v, 14)),
    "zookeeper.connect": ("zookeeper_connect", lambda k, v: v.strip()),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _positive),
    "zookeeper.set.acl": ("zookeeper_set_acl", _bool),
    "num.partitions": ("num_partitions", _positive),
    "default.replication.factor": ("default_replication_factor", _positive),
    "min.insync.replicas": ("min_insync_replicas", _positive),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
    "socket.request.max.bytes": ("socket_request_max_bytes", _positive),
    "max.connections": ("max_connections", _non_negative),
    "max.connections.per.ip": ("max_connections_per_ip", _non_negative),
    "max.connections.per.ip.overrides": ("max_connections_per_ip_overrides", parse_connection_overrides),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int),  # negative: never closed for idleness
    "queued.max.request.bytes": ("queued_max_request_bytes", _int),  # <= 0: unbounded
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _positive),
    "message.max.bytes": ("message_max_bytes", _non_negative),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", _positive),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _positive),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _non_negative),
    "replica.fetch.response.max.bytes": ("replica_fetch_response_max_bytes", _non_negative),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _non_negative),
    "replica.fetch.min.bytes": ("replica_fetch_min_bytes", _non_negative),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", _non_negative),
    "num.replica.fetchers": ("num_replica_fetchers", _positive),
    "replication.quota.window.num": ("replication_quota_window_num", _positive),
    "replication.quota.window.size.seconds": ("replication_quota_window_size_seconds", _positive),
    "quota.window.num": ("quota_window_num", _positive),
    "quota.window.size.seconds": ("quota_window_size_seconds", _positive),
    "quota.producer.default": ("quota_producer_default", _positive),
    "quota.consumer.default": ("quota_consumer_default", _positive),
    "quota.producer.override": ("quota_producer_override", parse_quota_overrides),
    "quota.consumer.override": ("quota_consumer_override", parse_quota_overrides),
    "controller.quota.window.num": ("controller_quota_window_num", _positive),
    "controller.quota.window.size.seconds": ("controller_quota_window_size_seconds", _positive),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _bool),
    "controlled.shutdown.max.retries": ("controlled_shutdown_max_retries", _non_negative),
    "controlled.shutdown.retry.backoff.ms": ("controlled_shutdown_retry_backoff_ms", _non_negative),
    "metrics.listener": ("metrics_listener", lambda k, v: v.strip() or None),
    "log.max.open.segment.files": ("log_max_open_segment_files", _non_negative),
    "log.page.cache.window.bytes": ("log_page_cache_window_bytes", lambda k, v: _int(k, v, -1)),
    "replication.throttle.leftover.warn.ms": ("replication_throttle_leftover_warn_ms", _positive),
    "log.retention.hours": ("log_retention_hours", _int),
    "log.retention.minutes": ("log_retention_minutes", _int),
    "log.retention.ms": ("log_retention_ms", _int),
    "log.retention.bytes": ("log_retention_bytes", _int),
    "log.roll.hours": ("log_roll_hours", _positive),
    "log.roll.ms": ("log_roll_ms", _positive),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _positive),
    "log.segment.delete.delay.ms": ("log_segment_delete_delay_ms", _non_negative),
    "log.cleanup.policy": ("log_cleanup_policy", _cleanup_policy),
    "log.cleaner.enable": ("log_cleaner_enable", _bool),
    "log.cleaner.threads": ("log_cleaner_threads", _non_negative),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", lambda k, v: _double(k, v)),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", _non_negative),
    "log.cleaner.min.cleanable.ratio": ("log_cleaner_min_cleanable_ratio", lambda k, v: _double(k, v, 0.0, 1.0)),
    "log.cleaner.min.compaction.lag.ms": ("log_cleaner_min_compaction_lag_ms", _non_negative),
    "log.cleaner.max.compaction.lag.ms": ("log_cleaner_max_compaction_lag_ms", _positive),
    "log.cleaner.delete.retention.ms": ("log_cleaner_delete_retention_ms", _non_negative),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _non_negative),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int),
    "group.max.size": ("group_max_size", _positive),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _int),
    "offsets.retention.minutes": ("offsets_retention_minutes", _positive),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", _positive),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _positive),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", lambda k, v: _int(k, v, 1, SHORT_MAX)),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _positive),
    "offsets.topic.compression.codec": ("offsets_topic_compression_codec", lambda k, v: _int(k, v, 0, 4)),
    "offsets.load.buffer.size": ("offsets_load_buffer_size", _positive),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _positive),
    "offsets.commit.required.acks": ("offsets_commit_required_acks", lambda k, v: _int(k, v, -1, SHORT_MAX)),
    "authorizer.class.name": ("authorizer_class_name", _authorizer_class),
    "super.users": ("super_users", _super_users),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _bool),
}

KNOWN_KEYS = frozenset(_PARSERS)


def _logical_lines(text: str) -> Iterable[str]:
    """Java properties lines: one ending in an odd number of backslashes continues on the next,
    whose leading blanks are dropped (how an inline PEM value spans lines)."""
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip() if pending is not None else raw
        if pending is None and line.strip()[:1] in ("#", "!"):
            yield line
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        yield (pending or "") + line
        pending = None
    if pending is not None:
        yield pending


def read_properties(path: Path) -> dict[str, str]:
    """Java-properties subset: `key=value` or `key: value`, `#`/`!` comments, `\\` continuations."""
    props: dict[str, str] = {}
    for line in _logical_lines(path.read_text()):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        for i, ch in enumerate(s):
            if ch in "=:":
                props[s[:i].strip()] = s[i + 1 :].strip()
                break
        else:
            props[s] = ""
    return props


def build_config(props: dict[str, str], overrides: Iterable[str] = (),
                 environ: Mapping[str, str] | None = None) -> BrokerConfig:
    """server.properties, then `KAFKA_*` variables from `environ` (config_env.py), then
    --override items, each layer over the one before. An error names the variable when the
    value came from one."""
    merged = dict(props)
    source: dict[str, str] = {}
    for key, (value, variable) in properties_from_env(environ or {}).items():
        merged[key] = value
        source[key] = variable
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(key, item, "an override must be key=value")
        merged[key.strip()] = value.strip()
        source.pop(key.strip(), None)
    try:
        cfg = _build(merged)
    except ConfigError as e:
        if e.key in source:
            raise ConfigError(e.key, merged.get(e.key, ""), f"{e.why} (from {source[e.key]})") from None
        raise
    _zookeeper_credentials(cfg, environ or {})
    return cfg


def _zookeeper_credentials(cfg: BrokerConfig, environ: Mapping[str, str]) -> None:
    """Kafka's KafkaServer.initZkClient: the client authenticates whenever the JAAS file has a
    `Client` section, and zookeeper.set.acl=true without one refuses to start."""
    try:
        cfg.zookeeper_credentials = jaas.credentials_from_env(environ)
    except jaas.JaasError as e:
        raise ConfigError(jaas.LOGIN_CONFIG_PROPERTY, "", f"{e} (from {jaas.OPTS_VARIABLE})") from None
    if cfg.zookeeper_set_acl and cfg.zookeeper_credentials is None:
        raise ConfigError("zookeeper.set.acl", "true", "no ZooKeeper credentials: set KAFKA_OPTS="
                          f"-D{jaas.LOGIN_CONFIG_PROPERTY}=<file> naming a JAAS file with a Client section")


def _build(merged: dict[str, str]) -> BrokerConfig:
    cfg = BrokerConfig()
    names = {f.name for f in fields(cfg)}
    for key, raw in merged.items():
        spec = _PARSERS.get(key)
        if spec is None and is_security_key(key):
            cfg.security_props[key] = raw
            continue
        if spec is None:
            cfg.unknown_keys.append(key)
            continue
        attr, parse = spec
        assert attr in names
        setattr(cfg, attr, parse(key, raw))
        cfg.given[key] = raw
    if "broker.id" not in merged:
        raise ConfigError("broker.id", "", "required")
    if cfg.max_connections_per_ip == 0 and not cfg.max_connections_per_ip_overrides:
        # Kafka's KafkaConfig requirement: 0 only makes sense as a default that overrides lift.
        raise ConfigError("max.connections.per.ip", "0", "0 requires max.connections.per.ip.overrides")
    if "security.inter.broker.protocol" in merged:
        if "inter.broker.listener.name" in merged:
            raise ConfigError("security.inter.broker.protocol", merged["security.inter.broker.protocol"],
                              "only one of inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set")
        cfg.inter_broker_listener_name = cfg.security_inter_broker_protocol
    _check_listeners(cfg, merged)
    _check_listener_security(cfg)
    _check_listener_sasl(cfg)
    return cfg


def _check_listeners(cfg: BrokerConfig, merged: dict[str, str]) -> None:
    """KafkaConfig's listener rules, with its messages where it has one."""
    raw = merged.get("listeners", "")
    names = [lst.name for lst in cfg.listeners]
    if len(set(names)) != len(names):
        raise ConfigError("listeners", raw, "each listener must have a different name")
    ports = [lst.port for lst in cfg.listeners if lst.port != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError("listeners", raw, "each listener must have a different port")
    protocols = cfg.listener_security_protocol_map
    for lst in cfg.listeners:
        proto = protocols.get(lst.name)
        if proto is None:
            raise ConfigError("listener.security.protocol.map", merged.get("listener.security.protocol.map", ""),
                              f"no security protocol defined for listener {lst.name}")
    if cfg.advertised_listeners is not None:
        adv_raw = merged.get("advertised.listeners", "")
        adv_names = [lst.name for lst in cfg.advertised_listeners]
        if len(set(adv_names)) != len(adv_names):
            raise ConfigError("advertised.listeners", adv_raw, "each listener must have a different name")
        for lst in cfg.advertised_listeners:
            if lst.name not in names:
                raise ConfigError("advertised.listeners", adv_raw,
                                  f"{lst.name} is not a listener name defined in listeners")
            if lst.host in ("0.0.0.0", "::"):
                raise ConfigError("advertised.listeners", adv_raw,
                                  "cannot use the nonroutable meta-address 0.0.0.0")
    if cfg.inter_broker_listener_name not in {lst.name for lst in cfg.advertised_endpoints}:
        key = ("security.inter.broker.protocol" if "security.inter.broker.protocol" in merged
               else "inter.broker.listener.name")
        raise ConfigError(key, merged.get(key, "PLAINTEXT"),
                          "must be a listener name defined in advertised.listeners")


def _check_listener_security(cfg: BrokerConfig) -> None:
    """Each TLS listener's SSL settings are well formed (their files are read when the broker starts)."""
    for lst in cfg.listeners:
        if cfg.listener_protocol(lst.name) in TLS_PROTOCOLS:
            try:
                listener_ssl_settings(cfg, lst.name, cfg.listener_protocol(lst.name))
            except SslSettingsError as e:
                raise ConfigError(e.key, e.value, e.why) from None


def _check_listener_sasl(cfg: BrokerConfig) -> None:
    """Each SASL listener's mechanisms, JAAS users and SASL numbers are usable (sasl_listeners' own checks)."""
    protocols = {lst.name: cfg.listener_protocol(lst.name) for lst in cfg.listeners}
    try:
        SaslListeners(protocols, cfg.listener_setting, CredentialCache(), key_of=cfg.listener_setting_key)
        if protocols.get(cfg.inter_broker_listener_name) in SASL_PROTOCOLS:
            inter_broker_sasl(cfg.listener_setting, cfg.inter_broker_listener_name)
    except SaslConfigError as e:
        raise ConfigError(e.key, "", e.why) from None


def load_config(path: Path, overrides: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> BrokerConfig:
    return build_config(read_properties(path), overrides, environ)


def _as_string(value: object) -> str | None:
    """A parsed value back in server.properties form (Kafka's ConfigDef.convertToString)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Listener):
        return f"{value.name}://{value.host}:{value.port}"
    if isinstance(value, list):
        return ",".join(s for s in (_as_string(v) for v in value) if s is not None)
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


def current_value(cfg: BrokerConfig, key: str) -> str | None:
    """A known key's value as DescribeConfigs shows it: as given, else the parsed default as a string."""
    if key in cfg.given:
        return cfg.given[key]
    return _as_string(getattr(cfg, _PARSERS[key][0]))
