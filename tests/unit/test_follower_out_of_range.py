"""The replica fetcher's OFFSET_OUT_OF_RANGE recovery (Kafka's handleOutOfRangeError): truncate when
the leader ends below us, start again empty at the leader's log start only when that start is above
our end (its retention passed us), and otherwise keep our log and retry from our end."""

from __future__ import annotations

from typing import Any

import pytest

from fetcher.replica_fetcher import FetcherSettings, ReplicaFetcher

TP = ("t", 0)


class Sink:
    def __init__(self, end: int) -> None:
        self.end = end
        self.calls: list[tuple[str, int]] = []

    def log_end_offset(self, tp: tuple[str, int]) -> int:
        return self.end

    def truncate_to(self, tp: tuple[str, int], offset: int) -> None:
        self.calls.append(("truncate", offset))

    def restart_at(self, tp: tuple[str, int], offset: int) -> None:
        self.calls.append(("restart", offset))


class Leader:
    """ListOffsets v1 answers of a leader whose log spans [start, end)."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    async def call(self, api: Any, version: int, body: Any) -> dict:  # noqa: ANN401
        ts = body["topics"][0]["partitions"][0]["timestamp"]
        offset = self.start if ts == -2 else self.end
        return {"topics": [{"partitions": [{"error_code": 0, "offset": offset}]}]}


@pytest.mark.parametrize(("mine", "start", "end", "expected"), [
    (500, 100, 400, [("truncate", 400)]),   # the leader ends below us
    (50, 100, 400, [("restart", 100)]),     # its retention passed our end
    (200, 100, 400, []),                    # within its log: keep ours, retry later
])
async def test_out_of_range_recovery(mine: int, start: int, end: int, expected: list) -> None:
    sink = Sink(mine)
    f = ReplicaFetcher("h", 1, 0, FetcherSettings(replica_id=2), sink)  # type: ignore[arg-type]
    f.partitions[TP] = 0.0
    await f._out_of_range(Leader(start, end), TP)  # type: ignore[arg-type]
    assert sink.calls == expected
    if not expected:
        assert f.partitions[TP] > 0.0  # backed off, not restarted
