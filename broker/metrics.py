"""A small Prometheus text registry (prefix `minibroker_`) and its HTTP endpoint.

Written here rather than pulled from prometheus_client because the broker needs
only counters, gauges, callback gauges and one histogram family, and label values
(client ids) must be escaped and bounded the same way everywhere.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import math
from collections.abc import Callable, Iterable

PREFIX = "minibroker_"
MAX_LABEL_CHARS = 200

LabelKey = tuple[tuple[str, str], ...]


def bounded(value: str, limit: int = MAX_LABEL_CHARS) -> str:
    """A label value or log field of at most `limit` characters that still tells long ids apart."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha1(value.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{value[:limit - 14]}~{digest}"


def _escape(value: str) -> str:
    value = bounded(value)
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(key: LabelKey, extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in key]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _fmt(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer():
        return str(int(v))
    return repr(float(v))


class _Family:
    kind = "untyped"

    def __init__(self, name: str, help_text: str) -> None:
        self.name = PREFIX + name
        self.help = help_text

    def samples(self) -> Iterable[str]:
        raise NotImplementedError

    def render(self) -> str:
        head = f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.kind}\n"
        return head + "".join(line + "\n" for line in self.samples())


class Counter(_Family):
    kind = "counter"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self.values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def samples(self) -> Iterable[str]:
        for key, v in self.values.items():
            yield f"{self.name}{_labels(key)} {_fmt(v)}"


class Gauge(_Family):
    kind = "gauge"

    def __init__(self, name: str, help_text: str, fn: Callable[[], Iterable[tuple[dict[str, str], float]]] | None = None) -> None:
        super().__init__(name, help_text)
        self.values: dict[LabelKey, float] = {}
        self.fn = fn

    def set(self, value: float, **labels: str) -> None:
        self.values[tuple(sorted(labels.items()))] = value

    def remove(self, **labels: str) -> None:
        self.values.pop(tuple(sorted(labels.items())), None)

    def samples(self) -> Iterable[str]:
        if self.fn is not None:
            for labels, v in self.fn():
                yield f"{self.name}{_labels(tuple(sorted(labels.items())))} {_fmt(v)}"
        for key, v in self.values.items():
            yield f"{self.name}{_labels(key)} {_fmt(v)}"


DEFAULT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram(_Family):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        super().__init__(name, help_text)
        self.buckets = buckets
        self.data: dict[LabelKey, list[float]] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        row = self.data.get(key)
        if row is None:
            row = self.data[key] = [0.0] * (len(self.buckets) + 2)  # buckets, count, sum
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.buckets):
            row[i] += 1
        row[-2] += 1
        row[-1] += value

    def samples(self) -> Iterable[str]:
        for key, row in self.data.items():
            cumulative = 0.0
            for i, bound in enumerate(self.buckets):
                cumulative += row[i]
                le = 'le="' + _fmt(bound) + '"'
                yield f"{self.name}_bucket{_labels(key, le)} {_fmt(cumulative)}"
            inf = 'le="+Inf"'
            yield f"{self.name}_bucket{_labels(key, inf)} {_fmt(row[-2])}"
            yield f"{self.name}_count{_labels(key)} {_fmt(row[-2])}"
            yield f"{self.name}_sum{_labels(key)} {_fmt(row[-1])}"


class Registry:
    def __init__(self) -> None:
        self.families: dict[str, _Family] = {}

    def _add(self, fam: _Family) -> _Family:
        self.families[fam.name] = fam
        return fam

    def counter(self, name: str, help_text: str) -> Counter:
        fam = self.families.get(PREFIX + name) or self._add(Counter(name, help_text))
        assert isinstance(fam, Counter)
        return fam

    def gauge(self, name: str, help_text: str, fn: Callable[[], Iterable[tuple[dict[str, str], float]]] | None = None) -> Gauge:
        fam = self.families.get(PREFIX + name) or self._add(Gauge(name, help_text, fn))
        assert isinstance(fam, Gauge)
        return fam

    def histogram(self, name: str, help_text: str) -> Histogram:
        fam = self.families.get(PREFIX + name) or self._add(Histogram(name, help_text))
        assert isinstance(fam, Histogram)
        return fam

    def render(self) -> str:
        return "".join(f.render() for f in self.families.values())


async def serve_metrics(registry: Registry, host: str, port: int) -> asyncio.Server:
    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.split()
            if len(parts) >= 2 and parts[1].split(b"?")[0] == b"/metrics":
                body = registry.render().encode()
                status = b"200 OK"
                ctype = b"text/plain; version=0.0.4; charset=utf-8"
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
