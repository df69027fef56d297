"""The broker's Prometheus metrics (prefix `minibroker_`) on prometheus_client, and their HTTP endpoint.

prometheus_client does the counting, the label escaping and the text exposition; this module
keeps the small surface the broker calls (`Registry.counter/gauge/histogram`, `.inc(**labels)`,
`.observe(v, **labels)`, callback gauges) on top of it, with three things of our own:

- One `CollectorRegistry` per `Registry` (per broker), never the process-global one, so that
  brokers and tests in one process do not share series.
- Every family is a collector registered when the broker creates it, so families come out in
  creation order with their HELP/TYPE even before the first sample, as they always have.
  Counters and histograms are prometheus_client's own, created at their first use because our
  call sites name their labels there rather than up front. Callback gauges yield a
  `GaugeMetricFamily` built from the callback at scrape time, callback counters (totals another
  part of the broker already keeps) a `CounterMetricFamily`.
- The exposition is what scrapers had before: every label value goes through `bounded()` (client
  ids are chosen by clients and may be huge), counters carry no `_created` samples, and histogram
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
from collections.abc import Callable, Iterable, Iterator

import prometheus_client
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

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


def _without_created(metrics: Iterable[Metric]) -> Iterator[Metric]:
    # prometheus_client adds a `_created` sample to counters and histograms; our scrapers and tests
    # have never seen one. Dropped here rather than with disable_created_metrics(), which would
    # flip a process-wide switch for every other user of the library.
    for m in metrics:
        m.samples = [s for s in m.samples if s.name != m.name + "_created"]
        yield m


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


class Counter(_Family):
    """prometheus_client's Counter; its label names are those of the first `inc` (others raise ValueError)."""

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self._metric: prometheus_client.Counter | None = None
        # The child per label set: `.labels()` validates and locks on every call, too slow for
        # the per-request counters.
        self._children: dict[LabelKey, prometheus_client.Counter] = {}

    def _empty(self) -> Metric:
        return CounterMetricFamily(self.name, self.help)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(labels.items())
        child = self._children.get(key)
        if child is None:
            if self._metric is None:
                # prometheus_client appends `_total` itself; registry=None: only this collector reports it.
                self._metric = prometheus_client.Counter(
                    self.name.removesuffix("_total"), self.help, sorted(labels), registry=None)
            child = self._children[key] = (self._metric.labels(**_bounded_labels(labels)) if labels
                                           else self._metric)
        child.inc(amount)

    def collect(self) -> Iterable[Metric]:
        if self._metric is None:
            return [self._empty()]
        return _without_created(self._metric.collect())


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


class Histogram(_Family):
    """prometheus_client's Histogram; its label names are those of the first `observe` (others raise ValueError)."""

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        super().__init__(name, help_text)
        self.buckets = buckets
        self._metric: prometheus_client.Histogram | None = None
        self._children: dict[LabelKey, prometheus_client.Histogram] = {}  # as in Counter

    def _empty(self) -> Metric:
        return HistogramMetricFamily(self.name, self.help)

    def observe(self, value: float, **labels: str) -> None:
        key = tuple(labels.items())
        child = self._children.get(key)
        if child is None:
            if self._metric is None:
                self._metric = prometheus_client.Histogram(
                    self.name, self.help, sorted(labels), buckets=self.buckets, registry=None)
            child = self._children[key] = (self._metric.labels(**_bounded_labels(labels)) if labels
                                           else self._metric)
        child.observe(value)

    def collect(self) -> Iterable[Metric]:
        if self._metric is None:
            return [self._empty()]
        metrics = list(_without_created(self._metric.collect()))
        for m in metrics:
            m.samples = [s._replace(labels={**s.labels, "le": _le(s.labels["le"])})
                         if "le" in s.labels else s for s in m.samples]
        return metrics


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
