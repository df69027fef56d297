"""The broker's Prometheus metrics (prefix `minibroker_`) on prometheus_client, and their HTTP endpoint.

prometheus_client does the counting, the label escaping and the text exposition; this module
keeps the small surface the broker calls (`Registry.counter/gauge/histogram`, `.inc(**labels)`,
`.observe(v, **labels)`, callback gauges) on top of it, with three things of our own:

- One `CollectorRegistry` per `Registry` (per broker), never the process-global one, so that
  brokers and tests in one process do not share series.
- Every family is a collector registered when the broker creates it, so families come out in
  creation order with their HELP/TYPE even before the first sample, as they always have.
  Counters and histograms count in plain Python (a float, a list of bucket counts) and yield
  prometheus_client's CounterMetricFamily / HistogramMetricFamily at scrape time: its own
  Counter and Histogram lock on every update, a few microseconds of every request. Their label
  names are fixed at first use because our call sites name their labels there rather than up
  front. Callback gauges yield a
  `GaugeMetricFamily` built from the callback at scrape time, callback counters (totals another
  part of the broker already keeps) a `CounterMetricFamily`.
- The exposition is what scrapers had before: every label value goes through `bounded()` (client
  ids are chosen by clients and may be huge), counters and histograms carry no `_created` samples, and histogram
  `le` labels keep their old spelling (`le="1"`, not prometheus_client's `le="1.0"`), since
  Prometheus 2 stores `le` as written and a new spelling would start new series.

The exposition is served by a small asyncio HTTP server on the broker's event loop rather than by
prometheus_client's `start_http_server`: that one runs in a thread, and the callback gauges read
the broker's loop-owned state (partitions, quota windows, throttles) without locks, which is only
safe from the loop itself.
"""

from __future__ import annotations

import asyncio
import hashlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString as _untyped_float_to_go

# prometheus_client's spelling of a bucket bound (as its own Histogram writes `le`), typed.
_float_to_go = cast(Callable[[float], str], _untyped_float_to_go)

PREFIX = "minibroker_"
MAX_LABEL_CHARS = 200

LabelKey = tuple[tuple[str, str], ...]
GaugeRows = Iterable[tuple[dict[str, str], float]]


def bounded(value: str, limit: int = MAX_LABEL_CHARS) -> str:
    """A label value or log field of at most `limit` characters that still tells long ids apart."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha1(value.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{value[:limit - 14]}~{digest}"


def _bounded_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: bounded(str(v)) for k, v in labels.items()}


class _Family:
    """One metric family: a collector in the broker's CollectorRegistry."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = PREFIX + name
        self.help = help_text

    def _empty(self) -> Metric:
        raise NotImplementedError

    def describe(self) -> list[Metric]:
        # Lets the CollectorRegistry refuse a second family of the same name.
        return [self._empty()]

    def collect(self) -> Iterable[Metric]:
        raise NotImplementedError


class CounterSeries:
    """One counter series: a plain float, read at scrape time on the same event loop."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class _Labelled:
    """Series by label set, for counters and histograms: label names are those of the first use
    (others raise ValueError, as prometheus_client's `.labels()` does), values go through
    `bounded()`, and a series is found by the call's own keywords without sorting or bounding
    them again (the per-request counters are incremented a few times per request)."""

    def _init_series(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._series: dict[tuple[str, ...], object] = {}  # by bounded label values, in name order
        self._by_call: dict[LabelKey, object] = {}  # the same series, by the keywords as called

    def _new(self) -> object:
        raise NotImplementedError

    def _find(self, labels: dict[str, str]) -> object:
        key = tuple(labels.items())
        series = self._by_call.get(key)
        if series is None:
            names = tuple(sorted(labels))
            if self._names is None:
                self._names = names
            elif names != self._names:
                raise ValueError(f"{self.name}: label names {list(names)} after {list(self._names)}")
            values = tuple(bounded(str(labels[n])) for n in names)
            series = self._series.get(values)
            if series is None:
                series = self._series[values] = self._new()
            self._by_call[key] = series
        return series

    name: str


class Counter(_Family, _Labelled):
    """A counter; its label names are those of the first `inc` (others raise ValueError).

    Counted in plain Python floats rather than prometheus_client's Counter, whose every `inc`
    takes a lock (the requests_total of every request); exposed through its CounterMetricFamily
    as before."""

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self._init_series()

    def _new(self) -> object:
        return CounterSeries()

    def _empty(self) -> Metric:
        return CounterMetricFamily(self.name, self.help)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        cast(CounterSeries, self._find(labels)).inc(amount)

    def series(self, **labels: str) -> CounterSeries:
        """The series of these labels, to keep and `inc()` directly (a per-request counter)."""
        return cast(CounterSeries, self._find(labels))

    def collect(self) -> Iterable[Metric]:
        if self._names is None:
            return [self._empty()]
        family = CounterMetricFamily(self.name, self.help, labels=list(self._names))
        for values, series in self._series.items():
            family.add_metric(list(values), cast(CounterSeries, series).value)
        return [family]


class Gauge(_Family):
    """A gauge whose series come from `fn` at scrape time, plus any set with `set()`."""

    def __init__(self, name: str, help_text: str, fn: Callable[[], GaugeRows] | None = None) -> None:
        super().__init__(name, help_text)
        self.values: dict[LabelKey, float] = {}
        self.fn = fn

    def _empty(self) -> Metric:
        return GaugeMetricFamily(self.name, self.help)

    def set(self, value: float, **labels: str) -> None:
        self.values[tuple(sorted(labels.items()))] = value

    def remove(self, **labels: str) -> None:
        self.values.pop(tuple(sorted(labels.items())), None)

    def _rows(self) -> Iterator[tuple[dict[str, str], float]]:
        if self.fn is not None:
            yield from self.fn()
        for key, v in self.values.items():
            yield dict(key), v

    def collect(self) -> Iterable[Metric]:
        family: GaugeMetricFamily | None = None
        names: list[str] = []
        for labels, value in self._rows():
            if family is None:
                names = sorted(labels)
                family = GaugeMetricFamily(self.name, self.help, labels=names)
            elif sorted(labels) != names:
                raise ValueError(f"{self.name}: label names {sorted(labels)} after {names}")
            bounded_labels = _bounded_labels(labels)
            family.add_metric([bounded_labels[n] for n in names], float(value))
        return [family or self._empty()]


class CallbackCounter(_Family):
    """A counter whose series come from `fn` at scrape time: for totals another part already keeps
    (a group's generation), so the broker does not count the same thing twice."""

    def __init__(self, name: str, help_text: str, fn: Callable[[], GaugeRows]) -> None:
        super().__init__(name, help_text)
        self.fn = fn

    def _empty(self) -> Metric:
        return CounterMetricFamily(self.name, self.help)

    def collect(self) -> Iterable[Metric]:
        family: CounterMetricFamily | None = None
        names: list[str] = []
        for labels, value in self.fn():
            if family is None:
                names = sorted(labels)
                family = CounterMetricFamily(self.name, self.help, labels=names)
            elif sorted(labels) != names:
                raise ValueError(f"{self.name}: label names {sorted(labels)} after {names}")
            bounded_labels = _bounded_labels(labels)
            family.add_metric([bounded_labels[n] for n in names], float(value))
        return [family or self._empty()]


DEFAULT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _le(le: str) -> str:
    # The `le` spelling scrapers have always seen: whole numbers without prometheus_client's ".0".
    bound = float(le)
    return str(int(bound)) if bound.is_integer() else le


class HistogramSeries:
    """One histogram series: a count per bucket (the last one +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # The first bucket whose upper bound is >= value, as prometheus_client's `amount <= bound`.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class Histogram(_Family, _Labelled):
    """A histogram; its label names are those of the first `observe` (others raise ValueError).

    Counted in plain Python (see Counter), exposed through HistogramMetricFamily with the `le`
    spelling scrapers have always seen."""

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        super().__init__(name, help_text)
        self.buckets = buckets
        self._les = [_le(_float_to_go(b)) for b in buckets] + ["+Inf"]
        self._init_series()

    def _new(self) -> object:
        return HistogramSeries(self.buckets)

    def _empty(self) -> Metric:
        return HistogramMetricFamily(self.name, self.help)

    def observe(self, value: float, **labels: str) -> None:
        cast(HistogramSeries, self._find(labels)).observe(value)

    def series(self, **labels: str) -> HistogramSeries:
        """The series of these labels, to keep and `observe()` directly (a per-request histogram)."""
        return cast(HistogramSeries, self._find(labels))

    def collect(self) -> Iterable[Metric]:
        if self._names is None:
            return [self._empty()]
        family = HistogramMetricFamily(self.name, self.help, labels=list(self._names))
        for values, series in self._series.items():
            h = cast(HistogramSeries, series)
            buckets, running = [], 0
            for le, n in zip(self._les, h.counts, strict=True):
                running += n
                buckets.append((le, float(running)))
            family.add_metric(list(values), buckets, h.sum)
        return [family]


class Registry:
    """The broker's metric families, in their own prometheus_client CollectorRegistry."""

    def __init__(self) -> None:
        self.collectors = CollectorRegistry()
        self.families: dict[str, _Family] = {}

    def _add(self, fam: _Family) -> _Family:
        self.collectors.register(fam)
        self.families[fam.name] = fam
        return fam

    def counter(self, name: str, help_text: str) -> Counter:
        fam = self.families.get(PREFIX + name) or self._add(Counter(name, help_text))
        assert isinstance(fam, Counter)
        return fam

    def gauge(self, name: str, help_text: str, fn: Callable[[], GaugeRows] | None = None) -> Gauge:
        fam = self.families.get(PREFIX + name) or self._add(Gauge(name, help_text, fn))
        assert isinstance(fam, Gauge)
        return fam

    def counter_fn(self, name: str, help_text: str, fn: Callable[[], GaugeRows]) -> CallbackCounter:
        fam = self.families.get(PREFIX + name) or self._add(CallbackCounter(name, help_text, fn))
        assert isinstance(fam, CallbackCounter)
        return fam

    def histogram(self, name: str, help_text: str) -> Histogram:
        fam = self.families.get(PREFIX + name) or self._add(Histogram(name, help_text))
        assert isinstance(fam, Histogram)
        return fam

    def render(self) -> str:
        return generate_latest(self.collectors).decode()


async def serve_metrics(registry: Registry, host: str, port: int) -> asyncio.Server:
    """GET /metrics on the calling event loop (see the module docstring for why not a thread)."""
    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.split()
            if len(parts) >= 2 and parts[1].split(b"?")[0] == b"/metrics":
                body = generate_latest(registry.collectors)
                status = b"200 OK"
                ctype = CONTENT_TYPE_LATEST.encode()
            else:
                body, status, ctype = b"not found\n", b"404 Not Found", b"text/plain"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype +
                         b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(on_conn, host, port, reuse_address=True)
