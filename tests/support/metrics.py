"""Reading a broker's Prometheus endpoint (`metrics.listener`; `BrokerProcess(metrics=True)`)."""

from __future__ import annotations

import re
import urllib.request
from typing import Protocol


class _HasMetrics(Protocol):
    metrics_url: str


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def scrape(target: _HasMetrics | str) -> str:
    """The exposition text of a broker (anything with `metrics_url`) or a metrics URL."""
    url = target if isinstance(target, str) else target.metrics_url
    return urllib.request.urlopen(url, timeout=5).read().decode()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every series of `minibroker_<name>` in an exposition text."""
    prefix = f"minibroker_{name}"
    out = []
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        head, _, value = line.rpartition(" ")
        series = head[len(prefix):]
        if series and not series.startswith("{"):
            continue  # another metric whose name starts with this one
        labels = {k: re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group()], v) for k, v in _LABEL.findall(series)}
        out.append((labels, float(value)))
    return out


def metric(target: _HasMetrics | str, name: str, **labels: str) -> float:
    """One metric, summed over its series matching `labels`; KeyError when there is none."""
    found = [value for series, value in samples(scrape(target), name)
             if all(series.get(k) == want for k, want in labels.items())]
    if not found:
        raise KeyError(name)
    return sum(found)
