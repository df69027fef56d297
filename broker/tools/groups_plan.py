"""The pure half of `minibroker groups`: argument forms, offset resets, describe rows.

No I/O here: the tool (groups_tool.py) asks the cluster for committed offsets, log start and
end offsets and offsets by time, then hands them to these functions. The rules are Kafka 2.8's
ConsumerGroupCommand:

- `--topic T` names every partition of T, `--topic T:0,2` the listed ones.
- `--to-earliest` / `--to-latest`: the log start / log end offset (ListOffsets' EARLIEST /
  LATEST, the high watermark: what a read_uncommitted consumer can reach).
- `--to-offset N` and `--shift-by N` (from the committed offset; a partition without one is an
  error) are clamped into [log start, log end], each clamp reported with Kafka's warning.
- `--to-datetime ISO`: the first offset whose timestamp is at or after it; a partition without
  such a record gets its log end offset. The text is Kafka's `Utils.getDateTime` form
  (`2024-05-01T12:00:00.000`, with an optional `Z`/`+01:00`/`+0100` offset; no offset means
  UTC); the milliseconds may be left out, which Kafka's strict parser would refuse.
- Describe rows: the members that have partitions (those with most partitions first), each
  member's partitions by partition number, then committed partitions no member holds, with
  `-` for what is unknown; LAG = log end - committed, only where both are known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

TopicPartition = tuple[str, int]
MISSING = "-"

RESET_MODES = ("to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime")


class PlanError(Exception):
    """An argument or a state the command refuses, with the message it prints."""


def tp_name(tp: TopicPartition) -> str:
    """Kafka's TopicPartition.toString: `topic-partition`."""
    return f"{tp[0]}-{tp[1]}"


def parse_topic_arg(arg: str) -> tuple[str, list[int] | None]:
    """`T` (every partition: None) or `T:P[,P...]`."""
    topic, sep, parts = arg.partition(":")
    if not topic:
        raise PlanError(f"--topic {arg!r} names no topic")
    if not sep:
        return topic, None
    try:
        partitions = [int(p) for p in parts.split(",")]
    except ValueError:
        raise PlanError(f"--topic {arg!r}: partitions must be numbers, as in T:0,1") from None
    if any(p < 0 for p in partitions):
        raise PlanError(f"--topic {arg!r}: partitions are >= 0")
    return topic, sorted(set(partitions))


_ZONE_WITHOUT_COLON = re.compile(r"([+-]\d\d)(\d\d)$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of Kafka's `--to-datetime` form (see the module docstring)."""
    date, sep, time_part = text.partition("T")
    if not sep:
        raise PlanError(f"Error parsing timestamp {text!r}: it does not contain a 'T' according to ISO8601 format")
    if not any(c in time_part for c in "+-Z"):
        text += "Z"
    normalised = _ZONE_WITHOUT_COLON.sub(r"\1:\2", text.replace("Z", "+00:00"))
    if re.fullmatch(r"(.*[+-]\d\d)", normalised):
        normalised += ":00"  # Kafka's pattern X also accepts an hour-only offset, +01
    try:
        parsed = datetime.fromisoformat(normalised)
    except ValueError:
        raise PlanError(f"Error parsing timestamp {text!r}: expected yyyy-MM-ddTHH:mm:ss.SSS[Z|+hh:mm]") from None
    if parsed.tzinfo is None:  # cannot happen after the suffix above, but keep UTC the rule
        parsed = parsed.replace(tzinfo=UTC)
    # Whole milliseconds, in integers (timestamp() * 1000 can land a float just below one).
    return (parsed - _EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class ResetSpec:
    mode: str  # one of RESET_MODES
    value: int | None = None  # N for to-offset and shift-by, the timestamp in ms for to-datetime


@dataclass
class ResetPlan:
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LogRange:
    start: int  # log start offset (EARLIEST)
    end: int  # log end offset as consumers see it (LATEST, the high watermark)


def _clamp(tp: TopicPartition, offset: int, log: LogRange, warnings: list[str]) -> int:
    # ConsumerGroupCommand.checkOffsetsRange: above the end first, then below the start.
    if offset > log.end:
        warnings.append(f"New offset ({offset}) is higher than latest offset for topic partition {tp_name(tp)}. "
                        f"Value will be set to {log.end}")
        return log.end
    if offset < log.start:
        warnings.append(f"New offset ({offset}) is lower than earliest offset for topic partition {tp_name(tp)}. "
                        f"Value will be set to {log.start}")
        return log.start
    return offset


def plan_reset(spec: ResetSpec, partitions: Sequence[TopicPartition], logs: Mapping[TopicPartition, LogRange],
               committed: Mapping[TopicPartition, int], by_time: Mapping[TopicPartition, int] | None = None) -> ResetPlan:
    """The new offset of each partition. `by_time` (to-datetime only) holds ListOffsets' answer
    for the timestamp, -1 where no record is at or after it."""
    plan = ResetPlan()
    for tp in partitions:
        log = logs.get(tp)
        if log is None:
            raise PlanError(f"Error getting offsets of topic partition: {tp_name(tp)}")
        if spec.mode == "to-earliest":
            plan.offsets[tp] = log.start
        elif spec.mode == "to-latest":
            plan.offsets[tp] = log.end
        elif spec.mode == "to-offset":
            assert spec.value is not None
            plan.offsets[tp] = _clamp(tp, spec.value, log, plan.warnings)
        elif spec.mode == "shift-by":
            assert spec.value is not None
            current = committed.get(tp)
            if current is None or current < 0:
                raise PlanError(f"Cannot shift offset for partition {tp_name(tp)} since there is no current "
                                f"committed offset")
            plan.offsets[tp] = _clamp(tp, current + spec.value, log, plan.warnings)
        elif spec.mode == "to-datetime":
            found = (by_time or {}).get(tp, -1)
            plan.offsets[tp] = found if found >= 0 else log.end
        else:
            raise PlanError(f"unknown reset mode {spec.mode!r}")
    return plan


@dataclass(frozen=True)
class MemberView:
    """One member as DescribeGroups shows it, its assignment decoded."""

    member_id: str
    client_id: str
    host: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class DescribeRow:
    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str
    host: str
    client_id: str

    def cells(self) -> list[str]:
        def show(v: object) -> str:
            return MISSING if v is None else str(v)
        return [self.group, show(self.topic), show(self.partition), show(self.current_offset),
                show(self.log_end_offset), show(self.lag), self.consumer_id, self.host, self.client_id]


DESCRIBE_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                    "HOST", "CLIENT-ID")


def lag_of(committed: int | None, log_end: int | None) -> int | None:
    """ConsumerGroupCommand.getLag: end - committed, unknown when either is (a committed -1 is none)."""
    if committed is None or committed == -1 or log_end is None:
        return None
    return log_end - committed


def describe_rows(group: str, members: Sequence[MemberView], committed: Mapping[TopicPartition, int],
                  log_ends: Mapping[TopicPartition, int | None]) -> list[DescribeRow]:
    rows: list[DescribeRow] = []
    assigned: set[TopicPartition] = set()
    holders = sorted((m for m in members if m.partitions), key=lambda m: len(m.partitions), reverse=True)
    for m in holders:
        for tp in sorted(m.partitions, key=lambda tp: tp[1]):
            assigned.add(tp)
            current = committed.get(tp)
            end = log_ends.get(tp)
            rows.append(DescribeRow(group, tp[0], tp[1], current, end, lag_of(current, end), m.member_id, m.host,
                                    m.client_id))
    for tp in sorted(set(committed) - assigned):
        current = committed[tp]
        end = log_ends.get(tp)
        rows.append(DescribeRow(group, tp[0], tp[1], current, end, lag_of(current, end), MISSING, MISSING, MISSING))
    return rows
