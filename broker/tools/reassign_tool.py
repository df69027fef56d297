"""`minibroker reassign`: kafka-reassign-partitions.sh --zookeeper, with KIP-73's --throttle.

--generate   proposes an assignment of the listed topics over --broker-list (Kafka's
             round-robin), printing the current and proposed assignments and the MoveRatio.
--execute    writes `/admin/reassign_partitions`; with --throttle, first sets the leader
             list (every current replica of a moving partition), the follower list (the
             destinations) and both rates on every broker involved. While a move runs, a
             re-run of the same plan only changes the rate; a different plan is refused.
--verify     prints each partition's status; once every partition is complete it removes
             the rates and lists (only then) and prints "Throttle was removed.".
             With --watch it shows live progress until the move completes: bytes remaining,
             SumReplicaLag, the measured throttled rate, and KIP-73's MoveTime next to the
             time the measured progress predicts; it warns when a broker's throttle is at or
             below the produce rate into the partitions it receives (the move cannot finish).
             On a terminal that is a rich progress bar redrawn in place; into a pipe or file,
             plain lines for every round.

Progress is read from each broker's metrics endpoint (named in its registration znode):
log sizes and log end offsets of the moving replicas, partition_bytes_in_rate on the
leaders, follower_replication_throttled_rate on the destinations.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.text import Text

from broker.apis.admin import AdminError, assign_replicas
from broker.controller.reassign_plan import (
    Assignment,
    PlanError,
    format_reassignment,
    merge_list,
    move_ratio,
    move_time,
    moving,
    parse_reassignment,
    parse_topics_to_move,
    suggest_rate,
    throttle_lists,
    validate,
)
from broker.tools.tool_support import NO_AUTH_HINT, ZK_AUTH_HELP, ToolError, connect_zk, fail
from broker.zk import layout as L
from broker.zk.client import NoAuthError, NoNodeError, ZkClient
from broker.zk.config_entities import (
    DEFAULT_ENTITY,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
)
from broker.zk.config_entities import InvalidConfig as _InvalidConfig
from broker.zk.config_writer import alter_entity, read_entity

TP = tuple[str, int]


_fail = fail


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise PlanError(f"cannot read {path}: {e}") from None


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


# ---- cluster reads ---------------------------------------------------------------------------


async def current_assignment(zk: ZkClient, topics: set[str] | None = None) -> Assignment:
    out: Assignment = {}
    for topic in await zk.get_children(L.BROKER_TOPICS):
        if topics is not None and topic not in topics:
            continue
        try:
            data, _ = await zk.get(L.topic_path(topic))
        except NoNodeError:
            continue
        for p, replicas in L.decode_assignment(data).items():
            out[(topic, p)] = replicas
    return out


async def registered_brokers(zk: ZkClient) -> dict[int, L.BrokerInfo]:
    out = {}
    for child in await zk.get_children(L.BROKER_IDS):
        try:
            data, _ = await zk.get(L.broker_path(int(child)))
            out[int(child)] = L.BrokerInfo.decode(int(child), data)
        except (NoNodeError, ValueError, KeyError):
            continue
    return out


async def running_reassignment(zk: ZkClient) -> Assignment | None:
    try:
        data, _ = await zk.get(L.REASSIGN)
    except NoNodeError:
        return None
    try:
        return parse_reassignment(data)
    except PlanError:
        return {}


# ---- throttles -------------------------------------------------------------------------------


async def set_throttle(zk: ZkClient, plan: Assignment, current: Assignment, rate: int) -> list[int]:
    """Lists on the moving topics, both rates on every broker involved; returns those brokers."""
    lists = throttle_lists(plan, current)
    for topic in sorted(set(lists.leader) | set(lists.follower)):
        cfg, _ = await read_entity(zk, "topics", topic)
        adds = {LEADER_REPLICAS: merge_list(cfg.get(LEADER_REPLICAS, ""), lists.leader.get(topic, [])),
                FOLLOWER_REPLICAS: merge_list(cfg.get(FOLLOWER_REPLICAS, ""), lists.follower.get(topic, []))}
        await alter_entity(zk, "topics", topic, {k: v for k, v in adds.items() if v})
    await set_rates(zk, lists.brokers, rate)
    return lists.brokers


async def set_rates(zk: ZkClient, brokers: list[int], rate: int) -> None:
    for b in brokers:
        await alter_entity(zk, "brokers", str(b), {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})


async def remove_throttle(zk: ZkClient, plan: Assignment) -> bool:
    """Rates off every broker, the plan's entries off its topics' lists. True if anything was set."""
    removed = False
    for b in await zk.get_children(f"{L.CONFIG_ROOT}/brokers") if await zk.exists(f"{L.CONFIG_ROOT}/brokers") else []:
        cfg, _ = await read_entity(zk, "brokers", b)
        keys = [k for k in (LEADER_RATE, FOLLOWER_RATE) if k in cfg]
        if keys and b != DEFAULT_ENTITY:
            removed |= await alter_entity(zk, "brokers", b, {}, keys)
    for topic in sorted({t for t, _ in plan}):
        cfg, _ = await read_entity(zk, "topics", topic)
        keys = [k for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS) if k in cfg]
        if keys:
            removed |= await alter_entity(zk, "topics", topic, {}, keys)
    return removed


# ---- progress --------------------------------------------------------------------------------


def read_metrics(url: str, timeout: float = 3.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text into {name: [(labels, value)]} (names without the minibroker_ prefix)."""
    text = urllib.request.urlopen(url, timeout=timeout).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: dict[str, str] = {}
        for item in rest.rstrip("}").split('",') if rest else []:
            k, _, v = item.partition("=")
            labels[k.strip()] = v.strip().strip('"')
        try:
            out.setdefault(name.removeprefix("minibroker_"), []).append((labels, float(value)))
        except ValueError:
            continue
    return out


def _series(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> dict[TP, float]:
    return {(lb.get("topic", ""), int(lb.get("partition", -1))): v for lb, v in metrics.get(name, [])
            if "topic" in lb}


def _single(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    values = [v for lb, v in metrics.get(name, []) if not lb]
    return values[0] if values else None


@dataclass
class Snapshot:
    at: float
    remaining: dict[int, float] = field(default_factory=dict)  # destination broker -> bytes to copy
    sending: dict[int, float] = field(default_factory=dict)  # leader -> bytes it must still send
    leader_inbound: dict[int, float] = field(default_factory=dict)  # leader -> produce B/s it must forward
    copied: float = 0.0  # bytes the destinations hold of the moving partitions
    lag: int = 0  # SumReplicaLag over the moving replicas (messages)
    inbound: dict[int, float] = field(default_factory=dict)  # destination -> produce B/s into its partitions
    throttled_rate: float = 0.0  # follower throttled B/s on the destinations
    throttle: dict[int, float] = field(default_factory=dict)  # destination -> follower rate in force
    missing: list[int] = field(default_factory=list)  # brokers without a readable metrics endpoint


async def snapshot(zk: ZkClient, running: Assignment) -> Snapshot:
    brokers = await registered_brokers(zk)
    snap = Snapshot(time.monotonic())
    metrics: dict[int, dict[str, list[tuple[dict[str, str], float]]]] = {}

    def metrics_of(b: int) -> dict[str, list[tuple[dict[str, str], float]]] | None:
        if b not in metrics:
            info = brokers.get(b)
            try:
                metrics[b] = read_metrics(info.metrics_url) if info and info.metrics_url else {}
            except OSError:
                metrics[b] = {}
            if not metrics[b]:
                snap.missing.append(b)
        return metrics[b] or None

    for tp, rar in sorted(running.items()):
        try:
            data, _ = await zk.get(L.partition_state_path(*tp))
            state = L.PartitionState.decode(data)
        except (NoNodeError, ValueError, KeyError):
            continue
        lm = metrics_of(state.leader)
        if lm is None:
            continue
        leader_size = _series(lm, "log_size_bytes").get(tp, 0.0)
        leader_leo = _series(lm, "log_end_offset").get(tp, 0.0)
        inbound = _series(lm, "partition_bytes_in_rate").get(tp, 0.0)
        for dest in [b for b in rar if b not in state.isr]:
            dm = metrics_of(dest)
            if dm is None:
                continue
            size = _series(dm, "log_size_bytes").get(tp, 0.0)
            snap.remaining[dest] = snap.remaining.get(dest, 0.0) + max(leader_size - size, 0.0)
            snap.sending[state.leader] = snap.sending.get(state.leader, 0.0) + max(leader_size - size, 0.0)
            snap.leader_inbound[state.leader] = snap.leader_inbound.get(state.leader, 0.0) + inbound
            snap.copied += size
            snap.lag += int(max(leader_leo - _series(dm, "log_end_offset").get(tp, 0.0), 0))
            snap.inbound[dest] = snap.inbound.get(dest, 0.0) + inbound
    for dest in snap.remaining:
        dm = metrics.get(dest) or {}
        snap.throttled_rate += _single(dm, "follower_replication_throttled_rate") or 0.0
        rate = _single(dm, "follower_replication_throttle_bytes_per_second")
        if rate is not None:
            snap.throttle[dest] = rate
    return snap


def copied_fraction(first: Snapshot, cur: Snapshot) -> float:
    """How much of the bytes the destinations lacked at the first round they now hold."""
    remaining = sum(cur.remaining.values())
    start_remaining = sum(first.remaining.values()) or remaining
    return max(0.0, min(1 - remaining / start_remaining, 1.0)) if start_remaining else 1.0


def progress_line(first: Snapshot, prev: Snapshot, cur: Snapshot, total_partitions: int, done: int) -> list[str]:
    """The --watch report for one round, and warnings when the move cannot finish."""
    remaining = sum(cur.remaining.values())
    dt = cur.at - prev.at
    progress_rate = (cur.copied - prev.copied) / dt if dt > 0 else 0.0
    lines = [f"{copied_fraction(first, cur) * 100:5.1f}% copied, {done}/{total_partitions} partitions done, "
             f"{_mb(remaining)} remaining, "
             f"SumReplicaLag {cur.lag}, throttled rate {_mb(cur.throttled_rate)}/s, "
             f"progress {_mb(progress_rate)}/s"]
    if cur.remaining and cur.throttle:
        t = min(cur.throttle.values())
        # Both sides are throttled: a leader feeding two destinations sends twice the bytes.
        est = max(move_time(cur.remaining, cur.inbound, t), move_time(cur.sending, cur.leader_inbound, t),
                  key=lambda e: float("inf") if e.seconds is None else e.seconds)
        measured = f"{remaining / progress_rate:.0f} s" if progress_rate > 0 else "n/a"
        if est.seconds is None:
            b = est.busiest_broker
            need = suggest_rate(cur.inbound.get(b or -1, 0.0), cur.remaining.get(b or -1, 0.0))
            lines.append(f"WARNING: the throttle {_mb(cur.throttle.get(b or -1, t))}/s on broker {b} is at or below "
                         f"the produce rate {_mb(cur.inbound.get(b or -1, 0.0))}/s into the partitions it receives: "
                         f"the move cannot finish. Re-run --execute with --throttle above "
                         f"{int(est.needed_rate)} (e.g. {int(need)} B/s finishes in about 10 minutes).")
        else:
            lines.append(f"ETA {est.seconds:.0f} s by KIP-73's MoveTime at {_mb(t)}/s "
                         f"(busiest broker {est.busiest_broker}); {measured} at the measured progress")
    elif cur.remaining:
        lines.append("no follower throttle in force on the destination brokers: the move runs unthrottled")
    if cur.missing:
        lines.append(f"(no metrics from broker(s) {sorted(set(cur.missing))}: set metrics.listener to see progress)")
    return lines


# ---- commands --------------------------------------------------------------------------------


async def generate(zk: ZkClient, args: argparse.Namespace) -> int:
    try:
        topics = parse_topics_to_move(_read(args.topics_to_move_json_file))
    except PlanError as e:
        return _fail(str(e))
    try:
        broker_list = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except ValueError:
        return _fail(f"--broker-list must be broker ids like 1,2,3, not {args.broker_list!r}")
    if not broker_list or len(set(broker_list)) != len(broker_list):
        return _fail(f"--broker-list must name distinct broker ids, got {args.broker_list!r}")
    unknown_brokers = sorted(set(broker_list) - set(await registered_brokers(zk)))
    if unknown_brokers:
        return _fail(f"broker(s) {unknown_brokers} are not registered in the cluster")
    current = await current_assignment(zk, set(topics))
    missing = sorted(set(topics) - {t for t, _ in current})
    if missing:
        return _fail(f"topic(s) {missing} do not exist")
    proposed: Assignment = {}
    rng = random.Random()
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            for p, replicas in assign_replicas(broker_list, len(parts), rf, rng=rng).items():
                proposed[(topic, p)] = replicas
        except AdminError as e:
            return _fail(f"topic {topic!r}: {e.message}")
    print("Current partition replica assignment\n")
    print(format_reassignment(current))
    print("\nProposed partition reassignment configuration\n")
    print(format_reassignment(proposed))
    print(f"\nMoveRatio: {move_ratio(proposed, current):.3f} "
          f"({len(moving(proposed, current))} of {len(current)} partitions change replicas)")
    return 0


def _parse_throttle(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise PlanError(f"--throttle must be a whole number of bytes per second, not {raw!r}") from None
    if value <= 0:
        raise PlanError(f"--throttle must be positive, not {value}")
    return value


async def _load_plan(zk: ZkClient, path: str) -> tuple[Assignment, Assignment]:
    plan = parse_reassignment(_read(path))
    current = await current_assignment(zk)
    validate(plan, current, await registered_brokers(zk))
    return plan, current


async def execute(zk: ZkClient, args: argparse.Namespace) -> int:
    try:
        throttle = _parse_throttle(args.throttle)
        plan, current = await _load_plan(zk, args.reassignment_json_file)
    except PlanError as e:
        return _fail(str(e))
    running = await running_reassignment(zk)
    if running is not None:
        differs = [tp for tp, r in running.items() if plan.get(tp) != r]
        if differs:
            return _fail(f"a different reassignment is running ({len(running)} partitions, e.g. "
                         f"{differs[0][0]}-{differs[0][1]} -> {running[differs[0]]}); wait for it to finish "
                         f"(--verify) before starting another")
        print("There is an existing assignment running.")
        if throttle is not None:
            await set_rates(zk, throttle_lists(plan, current).brokers, throttle)
            print(f"The throttle limit was set to {throttle} B/s.")
        return 0
    print("Current partition replica assignment\n")
    print(format_reassignment({tp: current[tp] for tp in plan}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        brokers = await set_throttle(zk, plan, current, throttle)
        print(f"The throttle limit was set to {throttle} B/s on brokers {brokers}.")
        print("Warning: You must run --verify periodically, until the reassignment completes, "
              "to ensure the throttle is removed. You can also alter the throttle by re-running "
              "--execute with a new --throttle.")
    try:
        await zk.create(L.REASSIGN, format_reassignment(plan).encode(), make_parents=True)
    except Exception as e:  # NodeExistsError: another tool started one meanwhile
        return _fail(f"could not start the reassignment: {type(e).__name__}: {e}")
    print("Successfully started reassignment of partitions.")
    return 0


async def _statuses(zk: ZkClient, plan: Assignment) -> dict[TP, str]:
    running = await running_reassignment(zk) or {}
    current = await current_assignment(zk, {t for t, _ in plan})
    out = {}
    for tp, replicas in sorted(plan.items()):
        if tp in running:
            out[tp] = "in progress"
        elif current.get(tp) == replicas:
            out[tp] = "completed successfully"
        else:
            out[tp] = "failed"
    return out


async def verify(zk: ZkClient, args: argparse.Namespace) -> int:
    try:
        plan = parse_reassignment(_read(args.reassignment_json_file))
    except PlanError as e:
        return _fail(str(e))
    if args.watch:
        await watch(zk, plan, args.interval)
    print("Status of partition reassignment:")
    statuses = await _statuses(zk, plan)
    for (t, p), status in statuses.items():
        print(f"Reassignment of partition {t}-{p} {status}")
    if all(s != "in progress" for s in statuses.values()):
        if await remove_throttle(zk, plan):
            print("Throttle was removed.")
    failed = [tp for tp, s in statuses.items() if s == "failed"]
    return 1 if failed else 0


class WatchView:
    """Where --watch reports go: a live rich progress bar on a terminal, plain lines otherwise.

    On a terminal the bar and the latest report are redrawn in place each round. Into a pipe or
    a file (scripts, CI logs, our tests) every round's report is written as plain lines, without
    escape codes or rich's wrapping, so the output reads and greps as before.
    """

    def __init__(self, console: Console, total_partitions: int, live: bool | None = None) -> None:
        self.console = console
        self.total = total_partitions
        self.live: Live | None = None
        if live is None:
            # A real terminal, not only rich's opinion: FORCE_COLOR in the environment makes rich
            # treat a pipe as a terminal, and a pipe's reader wants every round's lines.
            isatty = getattr(console.file, "isatty", None)
            live = console.is_terminal and bool(isatty and isatty())
        if live:
            self.bar = Progress(TextColumn("reassignment"), BarColumn(), TaskProgressColumn(),
                                TextColumn("{task.fields[partitions]}"), console=console)
            self.task = self.bar.add_task("reassignment", total=1.0, partitions="")
            self.live = Live(console=console, auto_refresh=False)
            self.live.start()

    def update(self, fraction: float, done: int, lines: list[str]) -> None:
        if self.live is None:
            for line in lines:
                self.console.out(line, highlight=False)
            return
        self.bar.update(self.task, completed=fraction, partitions=f"{done}/{self.total} partitions done")
        report = Text()
        for i, line in enumerate(lines):
            report.append(("\n" if i else "") + line, style="bold red" if line.startswith("WARNING") else "")
        self.live.update(Group(self.bar, report), refresh=True)

    def finish(self) -> None:
        done = f"{self.total}/{self.total} partitions done"
        if self.live is None:
            self.console.out(f"100.0% copied, {done}", highlight=False)
            return
        self.bar.update(self.task, completed=1.0, partitions=done)
        self.live.update(self.bar, refresh=True)
        self.close()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


async def watch(zk: ZkClient, plan: Assignment, interval: float, console: Console | None = None) -> None:
    view = WatchView(console or Console(), len(plan))
    first = prev = None
    try:
        while True:
            running = await running_reassignment(zk)
            running = {tp: r for tp, r in (running or {}).items() if tp in plan}
            if not running:
                view.finish()
                return
            cur = await snapshot(zk, running)
            first = first or cur
            done = len(plan) - len(running)
            view.update(copied_fraction(first, cur), done, progress_line(first, prev or cur, cur, len(plan), done))
            prev = cur
            await asyncio.sleep(interval)
    finally:
        view.close()


async def run(args: argparse.Namespace) -> int:
    modes = [m for m in ("generate", "execute", "verify") if getattr(args, m)]
    if len(modes) != 1:
        return _fail("give exactly one of --generate, --execute and --verify")
    if args.generate and not (args.topics_to_move_json_file and args.broker_list):
        return _fail("--generate needs --topics-to-move-json-file and --broker-list")
    if (args.execute or args.verify) and not args.reassignment_json_file:
        return _fail(f"--{modes[0]} needs --reassignment-json-file")
    if args.throttle is not None and not args.execute:
        return _fail("--throttle goes with --execute")
    try:
        zk = await connect_zk(args.zookeeper)
    except ToolError as e:
        return _fail(str(e))
    try:
        if args.generate:
            return await generate(zk, args)
        if args.execute:
            return await execute(zk, args)
        return await verify(zk, args)
    except _InvalidConfig as e:
        return _fail(str(e))
    except NoAuthError as e:
        return _fail(f"{e}: {NO_AUTH_HINT}")
    finally:
        await zk.close()


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("reassign", help="move partitions between brokers (kafka-reassign-partitions)",
                       epilog=ZK_AUTH_HELP)
    p.add_argument("--zookeeper", required=True, help="host:port[/chroot]")
    p.add_argument("--generate", action="store_true")
    p.add_argument("--execute", action="store_true")
    p.add_argument("--verify", action="store_true")
    p.add_argument("--topics-to-move-json-file")
    p.add_argument("--broker-list")
    p.add_argument("--reassignment-json-file")
    p.add_argument("--throttle", help="bytes/s for the move's replication traffic (KIP-73)")
    p.add_argument("--watch", action="store_true", help="with --verify: show progress until the move completes")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between --watch reports")
