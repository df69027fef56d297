"""Partition reassignment plans: parsing, validation, throttle lists and KIP-73's estimates.

Pure functions shared by `minibroker reassign` and the controller; no I/O, so every rule
here is unit-tested on plain dicts.

The reassignment JSON is Kafka's: `{"version":1,"partitions":[{"topic","partition","replicas"}]}`
(the same body lives in `/admin/reassign_partitions` while a move runs). The throttle lists
follow kafka-reassign-partitions 0.10.1: the leader list names every current replica of a
moving partition (any of them may lead while the move runs), the follower list only the
move destinations.

KIP-73's estimates, as this project computes them:
- MoveRatio: the share of the topics' replicas that change broker (moving / all).
- MoveTime: a throttle caps each broker, so the move takes as long as its busiest broker,
  `max over brokers b of bytes_b / (T - IN_b)`, where bytes_b is what b must receive
  (follower side) or send (leader side) and IN_b the produce rate into the moving
  partitions it takes part in. With `T <= IN_b` the move cannot finish: followers never
  catch up with a log that grows as fast as they copy it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TP = tuple[str, int]
Assignment = dict[TP, list[int]]


class PlanError(ValueError):
    """A reassignment file or request that must be refused; the message says why."""


def parse_reassignment(text: str | bytes) -> Assignment:
    """Kafka's reassignment JSON into {(topic, partition): replicas}; rejects malformed input."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PlanError(f"reassignment is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise PlanError('reassignment must be {"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}')
    out: Assignment = {}
    for i, item in enumerate(doc["partitions"]):
        if not isinstance(item, dict):
            raise PlanError(f"partitions[{i}] is not an object")
        topic, partition, replicas = item.get("topic"), item.get("partition"), item.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f"partitions[{i}] has no topic")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise PlanError(f"partitions[{i}] ({topic}) has no valid partition number")
        if (not isinstance(replicas, list) or not replicas
                or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in replicas)):
            raise PlanError(f"partition {topic}-{partition} needs a non-empty list of broker ids as replicas")
        if len(set(replicas)) != len(replicas):
            raise PlanError(f"partition {topic}-{partition} lists duplicate replicas {replicas}")
        if (topic, partition) in out:
            raise PlanError(f"partition {topic}-{partition} appears more than once")
        out[(topic, partition)] = list(replicas)
    if not out:
        raise PlanError("reassignment names no partitions")
    return out


def format_reassignment(assignment: Mapping[TP, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)])} for t, p in sorted(assignment)]},
        separators=(",", ":"))


def parse_topics_to_move(text: str) -> list[str]:
    """`{"topics":[{"topic":"a"},...],"version":1}` into topic names."""
    try:
        doc = json.loads(text)
        topics = [str(t["topic"]) for t in doc["topics"]]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise PlanError(f'topics-to-move file must be {{"topics":[{{"topic":"name"}}],"version":1}}: {e}') from None
    if not topics:
        raise PlanError("topics-to-move file names no topics")
    return topics


def validate(plan: Assignment, current: Mapping[TP, list[int]], brokers: Iterable[int]) -> None:
    """Refuses unknown topics, partitions or brokers, and replication-factor changes to zero."""
    known_brokers = set(brokers)
    topics = {t for t, _ in current}
    for (t, p), replicas in sorted(plan.items()):
        if t not in topics:
            raise PlanError(f"topic {t!r} does not exist")
        if (t, p) not in current:
            count = sum(1 for tt, _ in current if tt == t)
            raise PlanError(f"partition {t}-{p} does not exist (topic {t!r} has {count} partitions)")
        unknown = sorted(set(replicas) - known_brokers)
        if unknown:
            raise PlanError(f"partition {t}-{p}: broker(s) {unknown} are not registered in the cluster "
                            f"(live brokers: {sorted(known_brokers)})")


def moving(plan: Mapping[TP, list[int]], current: Mapping[TP, list[int]]) -> dict[TP, list[int]]:
    """The partitions whose replica set changes."""
    return {tp: r for tp, r in plan.items() if set(r) != set(current.get(tp, []))}


@dataclass(frozen=True)
class ThrottleLists:
    leader: dict[str, list[str]]  # topic -> ["p:b", ...]
    follower: dict[str, list[str]]
    brokers: list[int]  # every broker whose rates are set

    def leader_value(self, topic: str) -> str:
        return ",".join(self.leader.get(topic, []))

    def follower_value(self, topic: str) -> str:
        return ",".join(self.follower.get(topic, []))


def throttle_lists(plan: Mapping[TP, list[int]], current: Mapping[TP, list[int]]) -> ThrottleLists:
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (t, p), proposed in sorted(moving(plan, current).items()):
        existing = current[(t, p)]
        leader.setdefault(t, []).extend(f"{p}:{b}" for b in existing)
        follower.setdefault(t, []).extend(f"{p}:{b}" for b in proposed if b not in existing)
        brokers |= set(existing) | set(proposed)
    return ThrottleLists(leader, follower, sorted(brokers))


def merge_list(existing: str, additions: list[str]) -> str:
    """A topic's throttled-replica list with `additions` added (keeps what others set; `*` stays `*`)."""
    items = [s.strip() for s in existing.split(",") if s.strip()]
    if "*" in items:
        return "*"
    for a in additions:
        if a not in items:
            items.append(a)
    return ",".join(items)


def remove_from_list(existing: str, removals: list[str]) -> str:
    items = [s.strip() for s in existing.split(",") if s.strip()]
    return ",".join(i for i in items if i not in set(removals))


def move_ratio(plan: Mapping[TP, list[int]], current: Mapping[TP, list[int]]) -> float:
    """Replicas that change broker over all replicas of the plan's topics."""
    topics = {t for t, _ in plan}
    total = sum(len(r) for (t, _), r in current.items() if t in topics)
    moved = sum(len(set(r) - set(current.get(tp, []))) for tp, r in plan.items())
    return moved / total if total else 0.0


@dataclass(frozen=True)
class MoveEstimate:
    seconds: float | None  # None: cannot finish at this throttle
    busiest_broker: int | None
    needed_rate: float  # the smallest throttle above every broker's inbound rate


def move_time(bytes_per_broker: Mapping[int, float], inbound_per_broker: Mapping[int, float],
              throttle: float) -> MoveEstimate:
    """KIP-73's MoveTime at throttle T for per-broker byte totals and inbound rates."""
    worst, busiest = 0.0, None
    needed = max(inbound_per_broker.values(), default=0.0)
    for b, remaining in bytes_per_broker.items():
        if remaining <= 0:
            continue
        headroom = throttle - inbound_per_broker.get(b, 0.0)
        if headroom <= 0:
            return MoveEstimate(None, b, needed)
        t = remaining / headroom
        if t >= worst:
            worst, busiest = t, b
    return MoveEstimate(worst, busiest, needed)


def suggest_rate(inbound: float, bytes_remaining: float, target_seconds: float = 600) -> float:
    """A throttle that finishes `bytes_remaining` in about `target_seconds` despite `inbound`."""
    return inbound + max(bytes_remaining / target_seconds, 1 << 20)
