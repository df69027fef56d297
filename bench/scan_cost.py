"""CPU per produced batch of the produce path's record validation, this tree against another.

The batches are bench.produce_load's: one RecordBatch v2 of 10,000 keyless 100-byte records
(its one-partition phase) and one of 1,250 (what each of its 8 partitions gets per request in
the eight-partition phase, 10,000 records a round), plus a batch of varied value sizes and one
with headers and keys, which the equal-size fast path does not take. Each is checked by
`protocol.records.validator.validate` (header, CRC-32C, the record walk) and by
`record_scan.scan_records` alone, with this tree's modules and with `--before REF`'s
(record_scan.py and validator.py read from git and loaded beside this tree's, so both run in
one process, interleaved, and the machine's noise falls on both alike). Prints the median and
the 10th percentile of µs per batch over `--rounds` rounds of `--repeat` calls; with `--cold`
the caches are filled with other data before each call, as in a broker (the "scan" step then
includes the batch's CRC-32C, ~50 µs per MB, which validate runs first).

    .venv/bin/python -m bench.scan_cost [--before main] [--rounds 30] [--repeat 20] [--cold]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.produce_load import FIRST_TIMESTAMP, TOPIC_CONFIGS, record_batch
from protocol.records import record_scan, validator
from protocol.records.record_batch import HEADER_SIZE, batch_crc, build_batch

ROOT = Path(__file__).resolve().parent.parent
MAX_MESSAGE_BYTES = int(TOPIC_CONFIGS["max.message.bytes"])
NOW = FIRST_TIMESTAMP + 60_000
U8 = npt.NDArray[np.uint8]


def _from_git(ref: str, path: str, name: str, globals_: dict[str, object] | None = None) -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    module = types.ModuleType(name)
    module.__file__ = f"{ref}:{path}"
    sys.modules[name] = module  # dataclasses look their module up by name
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - our own tree's source at ref
    for key, value in (globals_ or {}).items():
        setattr(module, key, value)
    return module


def batches() -> dict[str, bytes]:
    varied = build_batch([(FIRST_TIMESTAMP + i, None, b"v" * (60 + i * 7 % 90), ()) for i in range(10_000)])
    headers = build_batch([(FIRST_TIMESTAMP + i // 3, b"key-%d" % i, b"v" * 100, (("h", b"x"),))
                           for i in range(10_000)])
    return {"10000x100": record_batch(10_000), "1250x100": record_batch(1_250), "100x100": record_batch(100),
            "10000 varied": varied, "10000 headers+keys": headers}


def _time(f: Callable[[], object], repeat: int, cold: U8 | None = None) -> float:
    if cold is None:
        start = time.perf_counter()
        for _ in range(repeat):
            f()
        return (time.perf_counter() - start) / repeat * 1e6
    spent = 0.0
    for _ in range(repeat):
        np.bitwise_or.reduce(cold)  # the caches filled with other data
        start = time.perf_counter()
        f()
        spent += time.perf_counter() - start
    return spent / repeat * 1e6


def _scan(scan: types.ModuleType, batch: bytes, body: memoryview, count: int, first_ts: int) -> object:
    return scan.scan_records(body, count, first_ts, NOW - 3_600_000, NOW + 3_600_000)


def _crc_then_scan(scan: types.ModuleType, batch: bytes, body: memoryview, count: int, first_ts: int) -> object:
    batch_crc(batch, 0, len(batch))  # what brings the batch into the caches before validate's scan
    return _scan(scan, batch, body, count, first_ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="git ref whose record_scan.py and validator.py run beside this tree's")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cold", action="store_true",
                    help="read 64 MB of other data before each call, so the batch is not in the caches (a "
                         "broker validates a batch once, just after receiving it); the scan step then runs "
                         "after the batch's CRC, as validate's does")
    args = ap.parse_args()
    cold: U8 | None = np.ones(64 << 20, dtype=np.uint8) if args.cold else None
    trees: dict[str, tuple[types.ModuleType, types.ModuleType]] = {}
    if args.before:
        scan_before = _from_git(args.before, "protocol/records/record_scan.py", "_before_record_scan")
        validator_before = _from_git(args.before, "protocol/records/validator.py", "_before_validator",
                                     {"record_scan": scan_before})
        trees[args.before] = (scan_before, validator_before)
    trees["this tree"] = (record_scan, validator)
    print(f"{'batch':<20} {'step':<9} " + " ".join(f"{name + ' p50':>16} {'p10':>8}" for name in trees))
    for label, batch in batches().items():
        (count,) = validator.RECORD_BATCH_HEADER.unpack_from(batch)[-1:]
        (first_ts,) = validator.RECORD_BATCH_HEADER.unpack_from(batch)[7:8]
        body = memoryview(batch)[HEADER_SIZE:]
        for step in ("validate", "scan"):
            calls: dict[str, Callable[[], object]] = {}
            for name, (scan, valid) in trees.items():
                config = valid.ValidationConfig(MAX_MESSAGE_BYTES)  # the bench's topics: no timestamp window
                if step == "validate":
                    calls[name] = functools.partial(valid.validate, batch, 7, NOW, config)
                else:
                    # With a timestamp window, as a topic with message.timestamp.difference.max.ms has.
                    calls[name] = functools.partial(_crc_then_scan if args.cold else _scan, scan, batch, body,
                                                    count, first_ts)
            times: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(args.rounds):
                for name, call in calls.items():
                    times[name].append(_time(call, args.repeat, cold))
            cells = []
            for name in calls:
                ts = sorted(times[name])
                cells.append(f"{statistics.median(ts):16.1f} {ts[len(ts) // 10]:8.1f}")
            print(f"{label:<20} {step:<9} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
