"""Drive one live broker with mutated requests while a good client produces and reads back.

`run_fuzz` is used by tests/fuzz/test_fuzz.py and bench/fuzz.py. It only ever connects to
127.0.0.1 on the port it is given, sends a bounded number of requests for a bounded time over
a bounded pool of connections (each request with a timeout), and stops by itself. The good
client (the project's own connection, acks=all Produce v2 and Fetch v3) works on a topic whose
name no seed holds, so a mutated request cannot name it.

Afterwards `check_broker` looks at the process: alive and answering, no traceback in its log,
RSS, sockets back to the baseline, no directory outside log.dirs.

Before the fuzz, `age_controller_epoch` moves the cluster's controller epoch far from the one
the seeds were captured with. The seeds' inter-broker requests carry the epochs of the broker
that captured them (controller epoch 1, broker epoch 29: the czxid of a first registration in
a fresh ZooKeeper), and a broker started the same way has exactly those: without the move, a
mutated UpdateMetadata was obeyed as the controller's (as Kafka without ACLs would obey it)
and could leave the broker advertising no endpoint.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.zk import layout as L
from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.records.records import decode_records
from tests.fuzz.mutate import Case, Mutator
from tests.fuzz.seeds import endpoints_safe, load_seeds, retarget
from tests.support.tools import ROOT
from tests.support.wire import connect, fetch, produce
from tests.support.zookeeper import zk_connect as zk_session

HOST = "127.0.0.1"  # the only host the fuzzer ever connects to
_SIZE = struct.Struct(">i")
MAX_RESPONSE = 64 << 20


# ---- the broker process, from /proc --------------------------------------------------------------

def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def socket_count(pid: int) -> int:
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return n


def dirs_outside(workdir: Path, log_dir: Path, parent: bool = True) -> set[str]:
    """Directories that a broker could create by mistake: the work dir (less log.dirs' contents),
    the project root (the broker's working directory) and, with `parent`, the work dir's parent
    (leave it out where other processes create directories there, as in /tmp)."""
    found = {str(p) for p in workdir.rglob("*") if p.is_dir() and log_dir not in p.parents}
    if parent:
        found |= {str(p) for p in workdir.parent.iterdir() if p.is_dir()}
    found |= {str(p) for p in ROOT.iterdir() if p.is_dir()}
    return found


# ---- the good client ------------------------------------------------------------------------------

@dataclass
class GoodClient:
    """Produces 10-message batches with acks=all to `topic` partition 0 and reads them back."""

    port: int
    topic: str
    acked: dict[int, bytes] = field(default_factory=dict)  # offset -> value
    errors: list[str] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (when, seconds)
    batches: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        conn: KafkaConnection | None = None
        n = 0
        while not stop.is_set():
            try:
                if conn is None:
                    conn = await connect(f"{HOST}:{self.port}", client_id="fuzz-good-client")
                values = [f"good-{n + i}".encode() for i in range(10)]
                t0 = time.monotonic()
                resp = await asyncio.wait_for(
                    produce(conn, self.topic, 0, [(None, v) for v in values], acks=-1), 10)
                self.latencies.append((t0, time.monotonic() - t0))
                if resp["error_code"] != 0:
                    self.errors.append(f"produce: error {resp['error_code']}")
                else:
                    base = resp["base_offset"]
                    self.acked.update({base + i: v for i, v in enumerate(values)})
                    self.batches += 1
                    if self.batches % 20 == 0:
                        t0 = time.monotonic()
                        got = await asyncio.wait_for(fetch(conn, [(self.topic, 0, base, 1 << 20)]), 10)
                        self.latencies.append((t0, time.monotonic() - t0))
                        if got[(self.topic, 0)]["error_code"] != 0:
                            self.errors.append(f"fetch: error {got[(self.topic, 0)]['error_code']}")
                n += 10
                await asyncio.sleep(0.01)
            except Exception as e:  # noqa: BLE001 - every failure of the good client is a finding
                self.errors.append(f"{type(e).__name__}: {e}")
                if conn is not None:
                    await conn.close()
                conn = None
                await asyncio.sleep(0.2)
        if conn is not None:
            await conn.close()

    async def verify(self) -> list[str]:
        """Every acknowledged message read back at its offset, unchanged: the missing or wrong ones."""
        seen: dict[int, bytes | None] = {}
        async with await connect(f"{HOST}:{self.port}", client_id="fuzz-good-client") as conn:
            offset, end = 0, (max(self.acked) + 1 if self.acked else 0)
            while offset < end:
                part = (await fetch(conn, [(self.topic, 0, offset, 4 << 20)]))[(self.topic, 0)]
                if part["error_code"] != 0:
                    return [f"read back at {offset}: error {part['error_code']}"]
                records = decode_records(part["records"] or b"")
                if not records:
                    break
                for rec in records:
                    seen[rec.offset] = rec.value
                offset = records[-1].offset + 1
        return [f"offset {o}: {seen.get(o)!r} != {v!r}" for o, v in sorted(self.acked.items()) if seen.get(o) != v]


# ---- the fuzzer -------------------------------------------------------------------------------------

@dataclass
class FuzzStats:
    sent: int = 0
    responses: int = 0
    closed_by_broker: int = 0
    timeouts: int = 0
    half_closed: int = 0
    connections: int = 0
    refused: int = 0          # connects that failed: the broker down or not accepting
    skipped_unsafe: int = 0   # mutants naming an endpoint other than the broker under test
    bad_responses: int = 0    # a response frame out of range or not ours by correlation id
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=50))  # the last cases, for a report
    timed_out: deque[str] = field(default_factory=lambda: deque(maxlen=200))  # cases left unanswered


async def _read_frame(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    """A response frame, or None when the broker closed the connection."""
    try:
        head = await asyncio.wait_for(reader.readexactly(4), timeout)
        (size,) = _SIZE.unpack(head)
        if not 0 <= size <= MAX_RESPONSE:
            raise ValueError(f"response size {size}")
        return await asyncio.wait_for(reader.readexactly(size), timeout)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class Fuzzer:
    def __init__(self, port: int, mutator: Mutator, requests: int, duration: float, connections: int = 32,
                 timeout: float = 2.0, per_connection: int = 20, journal: Path | None = None) -> None:
        self.port = port
        self.mutator = mutator
        self.requests = requests
        self.deadline = time.monotonic() + duration
        self.connections = connections
        self.timeout = timeout
        self.per_connection = per_connection
        self.stats = FuzzStats()
        self.rng = random.Random(mutator.r.random())  # session lengths, from the run's seed
        # Every case sent, with its time and bytes (hex, up to 4 KiB), to find what a finding came from.
        self.journal = open(journal, "w") if journal is not None else None  # noqa: SIM115 - closed in run()

    def stop(self) -> None:
        self.requests = self.stats.sent

    def _take(self) -> Case | None:
        while self.stats.sent < self.requests and time.monotonic() < self.deadline:
            case = self.mutator.next()
            if not endpoints_safe(case.data[4:], self.port):
                self.stats.skipped_unsafe += 1
                continue
            self.stats.sent += 1
            self.stats.recent.append(case.what)
            if self.journal is not None:
                self.journal.write(f"{time.time():.3f} {self.stats.sent} {case.what} | {case.data[:4096].hex()}\n")
            return case
        return None

    async def run(self) -> FuzzStats:
        try:
            await asyncio.gather(*(self._worker() for _ in range(self.connections)))
        finally:
            if self.journal is not None:
                self.journal.close()
        return self.stats

    async def _worker(self) -> None:
        s = self.stats
        while True:
            case = self._take()
            if case is None:
                return
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), self.timeout)
            except (OSError, TimeoutError):
                s.refused += 1
                await asyncio.sleep(0.1)
                continue
            s.connections += 1
            try:
                await self._session(case, reader, writer)
            except (OSError, ValueError):
                s.bad_responses += 1
            finally:
                writer.transport.abort()

    async def _session(self, case: Case | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Up to `per_connection` requests on one connection, until the broker closes it."""
        s = self.stats
        for _ in range(self.rng.randint(1, self.per_connection)):
            if case is None:
                case = self._take()
                if case is None:
                    return
            writer.write(case.data)
            if not case.complete:
                writer.write_eof()
                s.half_closed += 1
                # Drain whatever comes back until the broker closes its side.
                try:
                    while await _read_frame(reader, self.timeout) is not None:
                        s.responses += 1
                    s.closed_by_broker += 1
                except TimeoutError:
                    s.timeouts += 1
                    s.timed_out.append(f"{case.what} (port {writer.get_extra_info('sockname')[1]})")
                return
            try:
                frame = await _read_frame(reader, self.timeout)
            except TimeoutError:
                s.timeouts += 1
                s.timed_out.append(f"{case.what} (port {writer.get_extra_info('sockname')[1]})")
                return
            if frame is None:
                s.closed_by_broker += 1
                return
            s.responses += 1
            if len(frame) < 4 or frame[:4] != case.data[8:12]:
                s.bad_responses += 1  # answered out of turn: this connection is no longer in step
                return
            case = None


# ---- the cluster's age -----------------------------------------------------------------------------

# Far from every epoch a seed holds and from every value the mutator writes into an int field
# (its interesting values, a seed's value +-1 or x16): a mutant cannot name the current epoch.
AGED_EPOCHS = range(100_000, 10_000_000)


async def age_controller_epoch(zk_connect: str, port: int, seed: int, timeout: float = 30.0) -> int:
    """Gives the cluster the controller epoch of a long-lived one: sets `/controller_epoch` to a
    number drawn from the run's seed and deletes `/controller`, so that the broker is elected
    again with that number + 1, as after many elections. Returns the new epoch once ZooKeeper
    holds it, a controller is elected and the broker answers Metadata with itself."""
    aged = random.Random(seed ^ 0xE90C).choice(AGED_EPOCHS)
    deadline = time.monotonic() + timeout
    async with zk_session(zk_connect) as zk:
        await zk.set(L.CONTROLLER_EPOCH, str(aged).encode())
        await zk.delete(L.CONTROLLER)
        while True:
            epoch = int((await zk.get(L.CONTROLLER_EPOCH))[0])
            if epoch == aged + 1 and await zk.exists(L.CONTROLLER) and await answers(port):
                return epoch
            if time.monotonic() > deadline:
                raise TimeoutError(f"controller epoch {epoch} after {timeout}s, expected {aged + 1}")
            await asyncio.sleep(0.1)


# ---- a whole run ------------------------------------------------------------------------------------

@dataclass
class Sample:
    t: float
    rss: int
    sockets: int
    sent: int


@dataclass
class RunResult:
    seed: int
    stats: FuzzStats
    good: GoodClient
    elapsed: float
    rss_before: int
    samples: list[Sample]
    rss_exceeded: bool  # the run was cut short: the broker's RSS passed the limit

    def good_p99_ms(self) -> float:
        lat = sorted(d for _, d in self.good.latencies)
        return round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1) if lat else 0.0


def fuzz_seed() -> int:
    """MINIBROKER_FUZZ_SEED chooses the run; 15 by default, so a run is reproduced exactly."""
    return int(os.environ.get("MINIBROKER_FUZZ_SEED", "15"))


async def run_fuzz(pid: int, port: int, good_topic: str, *, zk_connect: str, seed: int, requests: int,
                   duration: float, max_frame: int, connections: int = 32, journal: Path | None = None,
                   rss_limit: int = 1 << 30, exclude: tuple[int, ...] = (),
                   on_sample: Callable[[Sample], Any] | None = None) -> RunResult:
    """Fuzz the broker (process `pid`, listening on 127.0.0.1:`port`) while a good client works.

    The fuzz stops early when the broker's RSS passes `rss_limit` (the machine is shared: a
    broker that balloons is a finding, not something to watch grow). `exclude` leaves the seeds
    of some API keys out, to look past a finding that hides the others. The cluster (ZooKeeper
    at `zk_connect`) is aged first (`age_controller_epoch`).
    """
    await age_controller_epoch(zk_connect, port, seed)
    seeds = [retarget(s, port) for s in load_seeds() if s.api_key not in exclude]
    mutator = Mutator(seeds, seed, max_frame)
    fuzzer = Fuzzer(port, mutator, requests, duration, connections, journal=journal)
    good = GoodClient(port, good_topic)
    stop = asyncio.Event()
    rss_before = rss_bytes(pid)
    samples: list[Sample] = []
    exceeded = False
    t0 = time.monotonic()

    async def sample() -> None:
        nonlocal exceeded
        while not stop.is_set():
            try:
                smp = Sample(time.monotonic() - t0, rss_bytes(pid), socket_count(pid), fuzzer.stats.sent)
            except OSError:  # the broker is gone
                fuzzer.stop()
                return
            samples.append(smp)
            if smp.rss > rss_limit:
                exceeded = True
                fuzzer.stop()
            if on_sample is not None:
                on_sample(smp)
            try:
                # A broker building a huge assignment grows by gigabytes a second: look often.
                await asyncio.wait_for(stop.wait(), 0.25)
            except TimeoutError:
                pass

    good_task = asyncio.create_task(good.run(stop))
    sampler = asyncio.create_task(sample())
    try:
        await fuzzer.run()
    finally:
        stop.set()
        await asyncio.gather(good_task, sampler)
    return RunResult(seed, fuzzer.stats, good, time.monotonic() - t0, rss_before, samples, exceeded)


async def answers(port: int, timeout: float = 5.0) -> bool:
    """The broker answers ApiVersions and Metadata on a fresh connection."""
    async def ask() -> bool:
        async with await connect(f"{HOST}:{port}", client_id="fuzz-check") as conn:
            av = await conn.request(ApiKey.API_VERSIONS, 0, {})
            md = await conn.request(ApiKey.METADATA, 1, {"topics": None})
            return av["error_code"] == 0 and len(md["brokers"]) >= 1
    try:
        return await asyncio.wait_for(ask(), timeout)
    except (OSError, TimeoutError, ConnectionError):
        return False


async def sockets_back(pid: int, baseline: int, timeout: float = 20.0) -> int:
    """The broker's socket count once it is back to `baseline` (or after `timeout`, whatever it is)."""
    deadline = time.monotonic() + timeout
    n = socket_count(pid)
    while n > baseline and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        n = socket_count(pid)
    return n


def tracebacks(log_text: str) -> list[str]:
    """Each traceback in a broker log, from the line that logged it to its last line (shortened)."""
    lines = log_text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if "Traceback" in line:
            found.append("\n".join(lines[max(0, i - 1):i + 30]))
    return found


def random_topic(seed: int) -> str:
    """The good client's topic: random characters no seed or mutation is likely to produce."""
    return "good-" + random.Random(seed ^ 0x5EED).randbytes(8).hex()
