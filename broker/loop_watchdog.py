"""A diagnostic, off by default: says when the event loop stalls, for how long, and where.

Enabled where `MINIBROKER_LOOP_WATCHDOG_MS` names a threshold in milliseconds (benches set it).
The loop beats every `interval`; a thread watches the beat, and while the beat is later than the
threshold it takes the loop thread's stack (`sys._current_frames()`: what holds the loop). When
the loop beats again it logs `event_loop.stalled` with the stall's length and, over it, the loop
thread's time on a CPU and waiting on a run queue (Linux's /proc/thread-self/schedstat: runnable
but not scheduled, the machine's other work), its context switches, the garbage collections
inside it and the stacks seen. What is neither on a CPU nor on a run queue the thread slept: a
blocking system call, or the GIL held by another thread. Collections longer than the
threshold's half are logged on their own (`gc.slow`), wherever they run.

The watching thread wakes once per threshold, not per beat: a thread that wakes takes the GIL,
and one preempted while holding it would stall the loop it watches.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import sys
import threading
import time
from typing import Any

import structlog

log = structlog.get_logger()

WATCHDOG_ENV = "MINIBROKER_LOOP_WATCHDOG_MS"
_STACKS_KEPT = 4


def from_environment() -> LoopWatchdog | None:
    raw = os.environ.get(WATCHDOG_ENV, "")
    try:
        threshold_ms = float(raw)
    except ValueError:
        return None
    return LoopWatchdog(threshold_ms / 1000) if threshold_ms > 0 else None


def _stack(frame: Any, depth: int = 10) -> list[str]:  # noqa: ANN401 - a frame object
    out: list[str] = []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        out.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return out


class LoopWatchdog:
    def __init__(self, threshold_s: float, interval_s: float = 0.005) -> None:
        self.threshold_s = threshold_s
        self.interval_s = interval_s
        self._beat = time.monotonic()
        self._beat_cpu = 0.0
        self._beat_sched = (0, 0)
        self._schedstat = -1
        self._beat_switches = (0, 0)
        self._stacks: list[tuple[float, list[str]]] = []
        self._gc_in_window: list[tuple[int, float]] = []
        self._gc_started = 0.0
        self._loop_thread = 0
        self._stopped = threading.Event()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:  # this thread's: opened here, on the loop's thread
            self._schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._schedstat = -1
        self._reset(time.monotonic())
        self._handle = self._loop.call_later(self.interval_s, self._tick)
        gc.callbacks.append(self._on_gc)
        threading.Thread(target=self._watch, name="loop-watchdog", daemon=True).start()
        log.info("event_loop.watchdog_started", threshold_ms=round(self.threshold_s * 1000, 1))

    def stop(self) -> None:
        self._stopped.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._schedstat >= 0:
            os.close(self._schedstat)
            self._schedstat = -1

    def _sched(self) -> tuple[int, int]:
        """The loop thread's nanoseconds on a CPU and waiting on a run queue, so far."""
        if self._schedstat < 0:
            return (0, 0)
        try:
            on_cpu, waiting, _ = os.pread(self._schedstat, 64, 0).split()
        except (OSError, ValueError):
            return (0, 0)
        return (int(on_cpu), int(waiting))

    @property
    def stacks_taken(self) -> int:
        """Stacks taken of the loop since its last beat (nonzero: a stall is being watched)."""
        return len(self._stacks)

    def _reset(self, now: float) -> None:
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        self._beat = now
        self._beat_cpu = time.thread_time()
        self._beat_switches = (usage.ru_nvcsw, usage.ru_nivcsw)
        self._beat_sched = self._sched()
        self._stacks = []
        self._gc_in_window = []

    def _tick(self) -> None:
        now = time.monotonic()
        stalled = now - self._beat - self.interval_s
        if stalled > self.threshold_s:
            usage = resource.getrusage(resource.RUSAGE_THREAD)
            _, waiting = self._sched()
            stacks = list(self._stacks)
            log.warning("event_loop.stalled", stalled_ms=round(stalled * 1000, 1),
                        loop_cpu_ms=round((time.thread_time() - self._beat_cpu) * 1000, 1),
                        run_queue_wait_ms=round((waiting - self._beat_sched[1]) / 1e6, 1),
                        voluntary_switches=usage.ru_nvcsw - self._beat_switches[0],
                        involuntary_switches=usage.ru_nivcsw - self._beat_switches[1],
                        gc=[f"gen{g} {ms:.1f}ms" for g, ms in self._gc_in_window],
                        stacks=[f"+{at * 1000:.0f}ms " + " < ".join(s) for at, s in stacks])
        self._reset(now)
        assert self._loop is not None
        self._handle = self._loop.call_later(self.interval_s, self._tick)

    def _watch(self) -> None:
        last_seen = 0.0
        while not self._stopped.wait(self.threshold_s):
            beat = self._beat
            late = time.monotonic() - beat - self.interval_s
            if late > self.threshold_s and len(self._stacks) < _STACKS_KEPT:
                frame = sys._current_frames().get(self._loop_thread)
                stack = _stack(frame)
                if beat != last_seen or not self._stacks or self._stacks[-1][1] != stack:
                    self._stacks.append((late, stack))
                last_seen = beat

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_started
        if threading.get_ident() == self._loop_thread:
            self._gc_in_window.append((info.get("generation", -1), took * 1000))
        if took > self.threshold_s / 2:
            log.warning("gc.slow", generation=info.get("generation"), took_ms=round(took * 1000, 1),
                        collected=info.get("collected"), thread=threading.current_thread().name)
