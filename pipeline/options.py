"""The data source's options, parsed once on the driver side into small picklable values.

Spark hands a Python data source its options as a string map; parsing them up front turns a
typo into an error at planning time, before any task runs. Names follow Spark's Kafka source
where one exists (`startingOffsets`, `endingOffsets`, `maxOffsetsPerTrigger`, `kafka.`-prefixed
bootstrap servers) so that a job can switch between the two by changing the format name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.client import EARLIEST, LATEST, ClientSettings, MinibrokerError, parse_bootstrap

# A partition's offset spec: a concrete offset >= 0, or EARLIEST (-2) / LATEST (-1) as in Spark's
# Kafka source. A spec maps partitions to those; partitions it leaves out take its default.
OffsetSpec = tuple[int, dict[int, int]]  # (default for unlisted partitions, explicit per partition)

# Offsets by timestamp (Spark's startingTimestamp / startingOffsetsByTimestamp and the ending
# pair): one timestamp for every partition, or one per partition, which must then name them all.
TimestampSpec = tuple[int | None, dict[int, int]]  # (global timestamp, per partition)

# What a starting timestamp with no record at or after it does (Spark's
# startingOffsetsByTimestampStrategy): fail the query, or start at the latest offset.
STRATEGY_ERROR, STRATEGY_LATEST = "error", "latest"

# The consumer group a streaming query commits its processed offsets to (Spark's Kafka source has
# no such option: its `kafka.group.id` only names the group of the consumers it reads with).
COMMIT_GROUP_OPTION = "commitOffsetsToGroup"

_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


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
                          request_timeout_s=_positive_ms(opts, "request.timeout.ms", 30_000))


def parse_offsets(raw: str | None, option: str, topic: str, default: int) -> OffsetSpec:
    """`earliest`, `latest` or JSON like `{"t": {"0": 23, "1": -2}}` into an OffsetSpec."""
    if raw is None or not raw.strip():
        return default, {}
    text = raw.strip()
    if text.lower() == "earliest":
        return EARLIEST, {}
    if text.lower() == "latest":
        return LATEST, {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise MinibrokerError(f"option {option} must be 'earliest', 'latest' or JSON like "
                              f'{{"{topic}": {{"0": 23, "1": -2}}}}: {e}') from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise MinibrokerError(f'option {option} must map topic to {{"partition": offset}}, got {text!r}')
    others = sorted(set(doc) - {topic})
    if others:
        raise MinibrokerError(f"option {option} names topic(s) {others} but the source reads {topic!r}")
    spec: dict[int, int] = {}
    for p, off in doc.get(topic, {}).items():
        try:
            partition = int(p)
        except ValueError:
            raise MinibrokerError(f"option {option}: partition {p!r} is not a number") from None
        if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
            raise MinibrokerError(f"option {option}: offset {off!r} of partition {partition} must be >= 0, "
                                  f"-2 (earliest) or -1 (latest)")
        spec[partition] = off
    return default, spec


def _timestamp(raw: str, option: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise MinibrokerError(f"option {option} must be a timestamp in milliseconds since the epoch, "
                              f"not {raw!r}") from None
    if value < 0:
        raise MinibrokerError(f"option {option} must be a timestamp >= 0, not {value}")
    return value


def parse_timestamps(opts: dict[str, str], single: str, by_partition: str, topic: str) -> TimestampSpec | None:
    """Spark's `<single>` (one timestamp for all partitions), else `<by_partition>` (JSON
    `{"t": {"0": 1700000000000}}`), else None; the single one takes precedence, as in Spark."""
    raw = _first(opts, single)
    if raw is not None:
        return _timestamp(raw, single), {}
    raw = _first(opts, by_partition)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise MinibrokerError(f'option {by_partition} must be JSON like {{"{topic}": {{"0": 1700000000000}}}}: '
                              f"{e}") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise MinibrokerError(f'option {by_partition} must map topic to {{"partition": timestamp}}, got {raw!r}')
    others = sorted(set(doc) - {topic})
    if others or topic not in doc:
        raise MinibrokerError(f"option {by_partition} names topic(s) {sorted(doc)} but the source reads {topic!r}")
    spec: dict[int, int] = {}
    for p, ts in doc[topic].items():
        try:
            partition = int(p)
        except ValueError:
            raise MinibrokerError(f"option {by_partition}: partition {p!r} is not a number") from None
        if not isinstance(ts, int) or isinstance(ts, bool):
            raise MinibrokerError(f"option {by_partition}: timestamp {ts!r} of partition {partition} is not a number")
        spec[partition] = _timestamp(str(ts), by_partition)
    return None, spec


@dataclass(frozen=True)
class ReadOptions:
    settings: ClientSettings
    topic: str
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

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        opts = _lower(options)
        topic = _first(opts, "topic", "subscribe")
        if not topic or "," in topic:
            raise MinibrokerError("option topic is required and names one topic, e.g. .option('topic', 'events')")
        # Like Spark's Kafka source: a batch reads everything by default, a stream starts at the end.
        starting = parse_offsets(_first(opts, "startingOffsets"), "startingOffsets", topic,
                                 LATEST if streaming else EARLIEST)
        if streaming and _first(opts, "endingOffsets") is not None:
            raise MinibrokerError("option endingOffsets applies to batch queries only")
        ending = parse_offsets(_first(opts, "endingOffsets"), "endingOffsets", topic, LATEST)
        if not streaming and _first(opts, "maxOffsetsPerTrigger") is not None:
            raise MinibrokerError("option maxOffsetsPerTrigger applies to streaming queries only")
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
        return cls(settings=client_settings(opts), topic=topic, starting=starting, ending=ending,
                   fetch_max_bytes=_positive_int(opts, "fetch.max.bytes", 1 << 20) or 1 << 20,
                   max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger", None),
                   starting_by_timestamp=parse_timestamps(opts, "startingTimestamp", "startingOffsetsByTimestamp",
                                                          topic),
                   ending_by_timestamp=parse_timestamps(opts, "endingTimestamp", "endingOffsetsByTimestamp", topic),
                   starting_timestamp_strategy=strategy, commit_group=commit_group)


@dataclass(frozen=True)
class WriteOptions:
    settings: ClientSettings
    topic: str | None  # None: every row names its topic in a `topic` column
    acks: int
    codec: int
    batch_bytes: int

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
                   batch_bytes=_positive_int(opts, "batch.size", 256 << 10) or 256 << 10)
