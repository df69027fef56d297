"""The data source's options, parsed once on the driver side into small picklable values.

Spark hands a Python data source its options as a string map; parsing them up front turns a
typo into an error at planning time, before any task runs. Names follow Spark's Kafka source
where one exists (`startingOffsets`, `endingOffsets`, `maxOffsetsPerTrigger`, `kafka.`-prefixed
bootstrap servers) so that a job can switch between the two by changing the format name.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace

from fetcher.sasl_client import MECHANISMS
from fetcher.security import ClientSecurity, SecurityConfigError
from pipeline.client import EARLIEST, LATEST, ClientSettings, MinibrokerError, parse_bootstrap

# A partition's offset spec: a concrete offset >= 0, or EARLIEST (-2) / LATEST (-1) as in Spark's
# Kafka source. A spec maps topics' partitions to those; partitions it leaves out take its default.
OffsetSpec = tuple[int, dict[str, dict[int, int]]]  # (default for unlisted partitions, topic -> partition -> offset)

# Offsets by timestamp (Spark's startingTimestamp / startingOffsetsByTimestamp and the ending
# pair): one timestamp for every partition, or one per partition, which must then name them all.
TimestampSpec = tuple[int | None, dict[str, dict[int, int]]]  # (global timestamp, topic -> partition -> ts)

# What a starting timestamp with no record at or after it does (Spark's
# startingOffsetsByTimestampStrategy): fail the query, or start at the latest offset.
STRATEGY_ERROR, STRATEGY_LATEST = "error", "latest"

# The consumer group a streaming query commits its processed offsets to (Spark's Kafka source has
# no such option: its `kafka.group.id` only names the group of the consumers it reads with).
COMMIT_GROUP_OPTION = "commitOffsetsToGroup"

_log = logging.getLogger(__name__)

_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark passes a case-insensitive map; normalise so lookups do not depend on its class.
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _first(opts: dict[str, str], *names: str) -> str | None:
    for n in names:
        if n.lower() in opts:
            return opts[n.lower()]
    return None


def _positive_ms(opts: dict[str, str], name: str, default_ms: int) -> float:
    raw = _first(opts, name)
    if raw is None:
        return default_ms / 1000
    try:
        value = int(raw)
    except ValueError:
        raise MinibrokerError(f"option {name} must be a whole number of milliseconds, not {raw!r}") from None
    if value <= 0:
        raise MinibrokerError(f"option {name} must be positive, not {value}")
    return value / 1000


def _positive_int(opts: dict[str, str], name: str, default: int | None) -> int | None:
    raw = _first(opts, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise MinibrokerError(f"option {name} must be a whole number, not {raw!r}") from None
    if value <= 0:
        raise MinibrokerError(f"option {name} must be positive, not {value}")
    return value


def client_settings(opts: dict[str, str]) -> ClientSettings:
    servers = _first(opts, "bootstrap.servers", "kafka.bootstrap.servers")
    if not servers:
        raise MinibrokerError("option bootstrap.servers is required, e.g. .option('bootstrap.servers', 'host:9092')")
    return ClientSettings(bootstrap=parse_bootstrap(servers),
                          connect_timeout_s=_positive_ms(opts, "timeout.ms", 10_000),
                          request_timeout_s=_positive_ms(opts, "request.timeout.ms", 30_000),
                          security=client_security(opts))


# The Kafka client's security keys the source and sink take as `kafka.<key>` (PEM stores, KIP-651,
# or PKCS12 ones with their passwords; fetcher.security.check_stores refuses JKS, naming the key).
SECURITY_KEYS = frozenset({
    "security.protocol", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.truststore.password", "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.keystore.password", "ssl.key.password", "ssl.endpoint.identification.algorithm",
    "ssl.enabled.protocols", "sasl.mechanism", "sasl.jaas.config"})


def client_security(opts: dict[str, str]) -> ClientSecurity:
    """`ClientSecurity.from_properties` over the `kafka.`-prefixed security options, prefix stripped.

    Errors name the option, never its value (a JAAS line or an inline key is a secret)."""
    props = {key[len("kafka."):]: value for key, value in opts.items()
             if key.startswith("kafka.") and key[len("kafka."):] in SECURITY_KEYS}
    try:
        security = ClientSecurity.from_properties(props)
    except SecurityConfigError as e:
        raise MinibrokerError(f"option kafka.{e.key}: {e.why}") from None
    if security.uses_sasl:
        if security.sasl_mechanism not in MECHANISMS:
            raise MinibrokerError(f"option kafka.sasl.mechanism must be one of {', '.join(MECHANISMS)} with "
                                  f"kafka.security.protocol={security.security_protocol} (Kafka's default, "
                                  f"GSSAPI, is not served)")
        if not security.sasl_username or security.sasl_password is None:
            raise MinibrokerError("option kafka.sasl.jaas.config must give username and password, e.g. "
                                  "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                  'username="alice" password="…";')
    return security


def parse_offsets(raw: str | None, option: str, subscription: Subscription, default: int) -> OffsetSpec:
    """`earliest`, `latest` or JSON like `{"t": {"0": 23, "1": -2}}` into an OffsetSpec."""
    if raw is None or not raw.strip():
        return default, {}
    text = raw.strip()
    if text.lower() == "earliest":
        return EARLIEST, {}
    if text.lower() == "latest":
        return LATEST, {}
    example = subscription.example_topic()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise MinibrokerError(f"option {option} must be 'earliest', 'latest' or JSON like "
                              f'{{"{example}": {{"0": 23, "1": -2}}}}: {e}') from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise MinibrokerError(f'option {option} must map topic to {{"partition": offset}}, got {text!r}')
    subscription.check_named(option, doc)
    spec: dict[str, dict[int, int]] = {}
    for topic, offsets in doc.items():
        for p, off in offsets.items():
            partition = _partition_number(option, p)
            if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                raise MinibrokerError(f"option {option}: offset {off!r} of {topic}-{partition} must be >= 0, "
                                      f"-2 (earliest) or -1 (latest)")
            spec.setdefault(topic, {})[partition] = off
    return default, spec


def _partition_number(option: str, raw: object) -> int:
    try:
        return int(str(raw))
    except ValueError:
        raise MinibrokerError(f"option {option}: partition {raw!r} is not a number") from None


def _timestamp(raw: str, option: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise MinibrokerError(f"option {option} must be a timestamp in milliseconds since the epoch, "
                              f"not {raw!r}") from None
    if value < 0:
        raise MinibrokerError(f"option {option} must be a timestamp >= 0, not {value}")
    return value


def parse_timestamps(opts: dict[str, str], single: str, by_partition: str,
                     subscription: Subscription) -> TimestampSpec | None:
    """Spark's `<single>` (one timestamp for all partitions), else `<by_partition>` (JSON
    `{"t": {"0": 1700000000000}}`), else None; the single one takes precedence, as in Spark."""
    raw = _first(opts, single)
    if raw is not None:
        return _timestamp(raw, single), {}
    raw = _first(opts, by_partition)
    if raw is None:
        return None
    example = subscription.example_topic()
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise MinibrokerError(f'option {by_partition} must be JSON like {{"{example}": {{"0": 1700000000000}}}}: '
                              f"{e}") from None
    if not isinstance(doc, dict) or not doc or not all(isinstance(v, dict) for v in doc.values()):
        raise MinibrokerError(f'option {by_partition} must map topic to {{"partition": timestamp}}, got {raw!r}')
    subscription.check_named(by_partition, doc)
    spec: dict[str, dict[int, int]] = {}
    for topic, stamps in doc.items():
        for p, ts in stamps.items():
            partition = _partition_number(by_partition, p)
            if not isinstance(ts, int) or isinstance(ts, bool):
                raise MinibrokerError(f"option {by_partition}: timestamp {ts!r} of {topic}-{partition} is not a number")
            spec.setdefault(topic, {})[partition] = _timestamp(str(ts), by_partition)
    return None, spec


# ---- which topic partitions a query reads (Spark's subscribe / subscribePattern / assign) ------------

SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN = "subscribe", "subscribePattern", "assign"
_STRATEGIES = f"{SUBSCRIBE}, {SUBSCRIBE_PATTERN}, {ASSIGN}"


@functools.lru_cache(maxsize=64)
def java_regex(pattern: str) -> re.Pattern[str]:
    """A Java regex (Spark hands subscribePattern to java.util.regex.Pattern) as a Python one.

    Translated: `\\Q...\\E` quoting and named groups `(?<name>...)`. Python's re (3.11) has
    Java's possessive quantifiers and atomic groups already; what it lacks fails here as an
    invalid pattern rather than matching differently: `\\p{...}` classes, `\\h`, `\\R`,
    `\\z`, class intersections `[a-z&&[^e]]` (a warning in Python, a nested set in Java).
    """
    text = re.sub(r"\\Q(.*?)(?:\\E|$)", lambda m: re.escape(m.group(1)), pattern, flags=re.S)
    text = re.sub(r"\(\?<([A-Za-z][A-Za-z0-9]*)>", r"(?P<\1>", text)
    if "&&" in text:
        raise MinibrokerError(f"option {SUBSCRIBE_PATTERN}: {pattern!r} uses a Java class intersection (&&), "
                              f"which Python's re cannot express")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return re.compile(text)
    except (re.error, FutureWarning) as e:
        raise MinibrokerError(f"option {SUBSCRIBE_PATTERN}: {pattern!r} is not a valid pattern: {e}") from None


@dataclass(frozen=True)
class Subscription:
    """Exactly one of: topics by name, topics whose whole name matches a pattern, or assigned partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    @property
    def option(self) -> str:
        return SUBSCRIBE_PATTERN if self.pattern is not None else ASSIGN if self.assigned else SUBSCRIBE

    def matches(self, topic: str) -> bool:
        """Whether a topic of that name belongs to the query (Java's Matcher.matches: the whole name)."""
        if self.pattern is not None:
            return java_regex(self.pattern).fullmatch(topic) is not None
        if self.assigned:
            return any(t == topic for t, _ in self.assigned)
        return topic in self.topics

    def example_topic(self) -> str:
        return self.topics[0] if self.topics else self.assigned[0][0] if self.assigned else "topic"

    def check_named(self, option: str, doc: Mapping[str, object]) -> None:
        """An offsets/timestamps option may only name topics the query reads."""
        others = sorted(t for t in doc if not self.matches(t))
        if others:
            raise MinibrokerError(f"option {option} names topic(s) {others}, which option {self.option} "
                                  f"does not read ({self.describe()})")

    def describe(self) -> str:
        if self.pattern is not None:
            return f"pattern {self.pattern!r}"
        if self.assigned:
            return "partitions " + ", ".join(f"{t}-{p}" for t, p in self.assigned)
        return "topics " + ", ".join(self.topics)

    @classmethod
    def parse(cls, opts: dict[str, str]) -> Subscription:
        # `topic` is this source's older name for one subscribed topic; Spark's reader ignores it.
        given = {name: raw for name in ("topic", SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)
                 if (raw := _first(opts, name)) is not None}
        kinds = {SUBSCRIBE if name == "topic" else name for name in given}
        if not kinds:
            raise MinibrokerError(f"One of the following options must be specified for the minibroker source: "
                                  f"{_STRATEGIES} (or topic, one topic), e.g. .option('subscribe', 'events')")
        if len(kinds) > 1 or ("topic" in given and SUBSCRIBE in given):
            raise MinibrokerError(f"Only one of the following options can be specified for the minibroker source: "
                                  f"{_STRATEGIES} (topic counts as subscribe); got {sorted(given)}")
        name, raw = next(iter(given.items()))
        if name in ("topic", SUBSCRIBE):
            topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
            if not topics:
                raise MinibrokerError(f"No topics to subscribe to as specified value for option '{name}' is '{raw}'")
            return cls(topics=topics)
        if name == SUBSCRIBE_PATTERN:
            if not raw.strip():
                raise MinibrokerError(f"Pattern to subscribe is empty as specified value for option "
                                      f"'subscribePattern' is '{raw}'")
            java_regex(raw.strip())
            return cls(pattern=raw.strip())
        if not raw.strip().startswith("{"):
            raise MinibrokerError(f"No topicpartitions to assign as specified value for option 'assign' is '{raw}'")
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as e:
            raise MinibrokerError(f'option assign must be JSON like {{"topicA": [0, 1], "topicB": [2, 4]}}: {e}') from None
        if (not isinstance(doc, dict) or not doc
                or not all(isinstance(v, list) and v and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                            for p in v) for v in doc.values())):
            raise MinibrokerError(f'option assign must map each topic to a list of partition numbers, like '
                                  f'{{"topicA": [0, 1], "topicB": [2, 4]}}; got {raw!r}')
        return cls(assigned=tuple(sorted({(t, p) for t, ps in doc.items() for p in ps})))


# ---- kafka.-prefixed options -------------------------------------------------------------------------

# Spark refuses these (KafkaSourceProvider.validateGeneralOptions); so does this source, in its words.
_KAFKA_REFUSED = {
    "auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
                         "'startingOffsets' to 'earliest' or 'latest' to specify where to start.",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported as keys are read as bytes. "
                        "Use DataFrame operations to explicitly deserialize the keys.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported as values are read as bytes. "
                          "Use DataFrame operations to explicitly deserialize the values.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
# kafka.<name> options that mean something to this source's client, and the plain option they set.
KAFKA_PASSED = {"bootstrap.servers": "bootstrap.servers", "client.id": "client.id",
                "request.timeout.ms": "request.timeout.ms", "default.api.timeout.ms": "timeout.ms",
                "fetch.max.bytes": "fetch.max.bytes", "max.partition.fetch.bytes": "fetch.max.bytes"}
_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def kafka_read_options(opts: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """`opts` with each meaningful `kafka.<name>` copied to the plain option it sets (a plain option
    given too wins), and the names of the kafka.* options that mean nothing here (to log)."""
    out = dict(opts)
    ignored: list[str] = []
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in _KAFKA_REFUSED:
            raise MinibrokerError(_KAFKA_REFUSED[name])
        if name == "isolation.level":
            if value.strip().lower() not in _ISOLATION_LEVELS:
                raise MinibrokerError(f"option kafka.isolation.level must be one of {list(_ISOLATION_LEVELS)}, "
                                      f"not {value!r}")
            continue  # no transactions: both levels read the same records
        if name in KAFKA_PASSED:
            out.setdefault(KAFKA_PASSED[name].lower(), value)
        elif name not in SECURITY_KEYS:  # read by client_security
            ignored.append(key)
    return out, ignored


def _boolean(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = _first(opts, name)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise MinibrokerError(f"option {name} must be true or false, not {raw!r}")
    return raw.strip().lower() == "true"


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(raw: str, option: str) -> int:
    """Spark's time strings (Utils.timeStringAsMs): a number with us, ms, s, m/min, h or d; bare = ms."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if m is None or m.group(2) not in ("", *_TIME_UNITS_MS):
        raise MinibrokerError(f"option {option} must be a duration like 15m, 30s or 500ms, not {raw!r}")
    return int(int(m.group(1)) * _TIME_UNITS_MS.get(m.group(2) or "ms", 1))


@dataclass(frozen=True)
class ReadOptions:
    settings: ClientSettings
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fetch_max_bytes: int
    max_offsets_per_trigger: int | None
    # Take precedence over `starting` / `ending` when set (Spark's order).
    starting_by_timestamp: TimestampSpec | None = None
    ending_by_timestamp: TimestampSpec | None = None
    starting_timestamp_strategy: str = STRATEGY_ERROR
    # Streaming only: after each micro-batch, commit its end offsets to this consumer group.
    commit_group: str | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        opts, ignored = kafka_read_options(_lower(options))
        if ignored:
            _log.info("kafka. options with no meaning to the minibroker source are ignored: %s", ", ".join(ignored))
        subscription = Subscription.parse(opts)
        # Like Spark's Kafka source: a batch reads everything by default, a stream starts at the end.
        starting = parse_offsets(_first(opts, "startingOffsets"), "startingOffsets", subscription,
                                 LATEST if streaming else EARLIEST)
        if streaming and _first(opts, "endingOffsets") is not None:
            raise MinibrokerError("option endingOffsets applies to batch queries only")
        ending = parse_offsets(_first(opts, "endingOffsets"), "endingOffsets", subscription, LATEST)
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if not streaming and _first(opts, name) is not None:
                raise MinibrokerError(f"option {name} applies to streaming queries only")
        if streaming and (_first(opts, "endingTimestamp") is not None
                          or _first(opts, "endingOffsetsByTimestamp") is not None):
            raise MinibrokerError("options endingTimestamp and endingOffsetsByTimestamp apply to batch queries only")
        commit_group = _first(opts, COMMIT_GROUP_OPTION)
        if commit_group is not None:
            if not streaming:
                raise MinibrokerError(f"option {COMMIT_GROUP_OPTION} applies to streaming queries only")
            commit_group = commit_group.strip()
            if not commit_group:
                raise MinibrokerError(f"option {COMMIT_GROUP_OPTION} names a consumer group; it is empty")
        strategy = (_first(opts, "startingOffsetsByTimestampStrategy") or STRATEGY_ERROR).strip().lower()
        if strategy not in (STRATEGY_ERROR, STRATEGY_LATEST):
            raise MinibrokerError(f"option startingOffsetsByTimestampStrategy must be 'error' or 'latest', "
                                  f"not {strategy!r}")
        starting_ts = parse_timestamps(opts, "startingTimestamp", "startingOffsetsByTimestamp", subscription)
        if not streaming and starting_ts is None and (starting[0] == LATEST or LATEST in _values(starting)):
            raise MinibrokerError("option startingOffsets can't be latest for batch queries (Spark's rule): "
                                  "a batch would read nothing from such partitions")
        ending_ts = parse_timestamps(opts, "endingTimestamp", "endingOffsetsByTimestamp", subscription)
        if not streaming and ending_ts is None and (ending[0] == EARLIEST or EARLIEST in _values(ending)):
            raise MinibrokerError("option endingOffsets can't be earliest for batch queries (Spark's rule)")
        max_rows = _positive_int(opts, "maxOffsetsPerTrigger", None)
        min_rows = _positive_int(opts, "minOffsetsPerTrigger", None)
        if max_rows is not None and min_rows is not None and min_rows > max_rows:
            raise MinibrokerError(f"The value of minOffsetsPerTrigger({min_rows}) is higher than the "
                                  f"maxOffsetsPerTrigger({max_rows}).")
        delay_raw = _first(opts, "maxTriggerDelay")
        return cls(settings=_with_client_id(client_settings(opts), opts), subscription=subscription,
                   starting=starting, ending=ending,
                   fetch_max_bytes=_positive_int(opts, "fetch.max.bytes", 1 << 20) or 1 << 20,
                   max_offsets_per_trigger=max_rows, starting_by_timestamp=starting_ts,
                   ending_by_timestamp=ending_ts, starting_timestamp_strategy=strategy, commit_group=commit_group,
                   include_headers=_boolean(opts, "includeHeaders", False),
                   fail_on_data_loss=_boolean(opts, "failOnDataLoss", True),
                   min_partitions=_positive_int(opts, "minPartitions", None),
                   min_offsets_per_trigger=min_rows,
                   max_trigger_delay_ms=15 * 60_000 if delay_raw is None else duration_ms(delay_raw, "maxTriggerDelay"))


def _values(spec: OffsetSpec) -> list[int]:
    return [o for offsets in spec[1].values() for o in offsets.values()]


def _with_client_id(settings: ClientSettings, opts: dict[str, str]) -> ClientSettings:
    client_id = _first(opts, "client.id")
    return replace(settings, client_id=client_id.strip()) if client_id and client_id.strip() else settings


def _idempotence(opts: dict[str, str], acks: int) -> bool:
    """`enable.idempotence`: on by default, as in Kafka 3's producer; off by default with acks=1
    (Kafka 3 does the same), and asking for it with acks=1 is the error Kafka's producer raises."""
    raw = _first(opts, "enable.idempotence", "kafka.enable.idempotence")
    if raw is None:
        return acks == -1
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise MinibrokerError(f"option enable.idempotence must be true or false, not {raw!r}")
    if value == "true" and acks != -1:
        raise MinibrokerError("option enable.idempotence=true needs acks=all (the idempotent producer's rule)")
    return value == "true"


@dataclass(frozen=True)
class WriteOptions:
    settings: ClientSettings
    topic: str | None  # None: every row names its topic in a `topic` column
    acks: int
    codec: int
    batch_bytes: int
    # A producer id per task attempt and a sequence per partition: a retried request never appends twice.
    idempotent: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        opts = _lower(options)
        acks_raw = (_first(opts, "acks", "kafka.acks") or "all").strip().lower()
        acks = {"all": -1, "-1": -1, "1": 1}.get(acks_raw)
        if acks is None:
            raise MinibrokerError(f"option acks must be 'all' (-1) or 1, not {acks_raw!r}")
        codec_raw = (_first(opts, "compression.type", "kafka.compression.type") or "none").strip().lower()
        if codec_raw not in _CODECS:
            raise MinibrokerError(f"option compression.type must be one of {sorted(_CODECS)}, not {codec_raw!r}")
        return cls(settings=client_settings(opts), topic=_first(opts, "topic") or None, acks=acks,
                   codec=_CODECS[codec_raw],
                   batch_bytes=_positive_int(opts, "batch.size", 256 << 10) or 256 << 10,
                   idempotent=_idempotence(opts, acks))
