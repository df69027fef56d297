"""Delayed operations watched by key, with deadlines: the bookkeeping of a purgatory, sans-IO.

Kafka's DelayedOperationPurgatory keeps each waiting operation (a long-poll Fetch, an acks=all
Produce) on the watch list of every partition it waits for; an append to a partition checks
only the operations on that partition's list, and a timer wheel expires the rest. `Watchers`
is that bookkeeping alone: which operations watch which keys, and when each one's wait ends.
It takes a clock and does no I/O; broker.signal.KeyedSignal drives it from the event loop.

An operation leaves every list at once when it is woken, expires or is cancelled, so a wake-up
of one key never visits an operation twice, and an idle operation costs nothing to the appends
of keys it does not watch. Deadlines live in a heap; entries of operations already gone are
dropped lazily when they reach its top.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
W = TypeVar("W", bound=Hashable)


class Watchers(Generic[K, W]):
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._by_key: dict[K, dict[W, None]] = {}  # insertion-ordered: woken oldest first
        self._keys_of: dict[W, tuple[K, ...]] = {}
        self._entry_of: dict[W, int] = {}  # the heap entry of its current wait
        self._deadlines: list[tuple[float, int, W]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._keys_of)

    def __contains__(self, op: object) -> bool:
        return op in self._keys_of

    def watching(self, key: K) -> int:
        """How many operations wait on `key`."""
        return len(self._by_key.get(key, ()))

    def watch(self, op: W, keys: Iterable[K], timeout: float) -> None:
        """`op` waits on each of `keys` until woken, or until `timeout` from now."""
        if op in self._keys_of:
            self.cancel(op)
        unique = tuple(dict.fromkeys(keys))
        self._keys_of[op] = unique
        for key in unique:
            self._by_key.setdefault(key, {})[op] = None
        seq = next(self._seq)
        self._entry_of[op] = seq
        heapq.heappush(self._deadlines, (self.clock() + max(timeout, 0.0), seq, op))

    def _stale(self, entry: tuple[float, int, W]) -> bool:
        return self._entry_of.get(entry[2]) != entry[1]

    def cancel(self, op: W) -> bool:
        """`op` waits no more (its waiter went); False if it was not watching."""
        keys = self._keys_of.pop(op, None)
        if keys is None:
            return False
        del self._entry_of[op]
        for key in keys:
            ops = self._by_key.get(key)
            if ops is not None:
                ops.pop(op, None)
                if not ops:
                    del self._by_key[key]
        return True

    def fire(self, key: K) -> list[W]:
        """The operations waiting on `key`, oldest first, each now watching nothing."""
        ops = self._by_key.get(key)
        if not ops:
            return []
        woken = list(ops)
        for op in woken:
            self.cancel(op)
        return woken

    def fire_all(self) -> list[W]:
        """Every waiting operation (a log directory failed: all of them answer now)."""
        woken = list(self._keys_of)
        self._by_key.clear()
        self._keys_of.clear()
        self._entry_of.clear()
        self._deadlines.clear()
        return woken

    def expire(self) -> list[W]:
        """The operations whose deadline has passed by the clock, each now watching nothing."""
        now = self.clock()
        out: list[W] = []
        heap = self._deadlines
        while heap and (heap[0][0] <= now or self._stale(heap[0])):
            entry = heapq.heappop(heap)
            if not self._stale(entry):
                self.cancel(entry[2])
                out.append(entry[2])
        return out

    def next_deadline(self) -> float | None:
        """The earliest deadline of an operation still waiting (None: nothing waits)."""
        heap = self._deadlines
        while heap and self._stale(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None
