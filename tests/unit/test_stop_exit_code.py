"""broker.server.Broker.stop says whether the logs were closed and made durable (SIGTERM's promise
in design.md): a log that cannot be closed makes it False and `minibroker serve` exit 1. A phase
before them that raises or overruns its bound is logged in `broker.stop_failed` with exit code 0,
as Kafka 2.8 swallows each step's error; the phases after a failed one still run."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from broker.config import build_config
from broker.log import segment as segment_module
from broker.server import Broker
from protocol.records.message_set import build_message_set


def broker(tmp_path: Path) -> Broker:
    # Never started: every phase has nothing to stop but what a test gives it.
    cfg = build_config({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path),
                        "listeners": "PLAINTEXT://127.0.0.1:0", "controlled.shutdown.enable": "false"})
    return Broker(cfg)


async def test_a_shutdown_where_every_phase_completes_is_a_success(tmp_path: Path) -> None:
    b = broker(tmp_path)
    with capture_logs() as events:
        assert await b.stop() is True
    assert not [e for e in events if e["event"] == "broker.stop_failed"]


async def test_a_phase_that_raises_is_logged_the_logs_still_close_and_the_exit_stays_0(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    b = broker(tmp_path)
    closed: list[bool] = []
    real_stop = b.replicas.stop

    async def fetchers_fail() -> None:
        raise RuntimeError("a fetcher would not stop")

    async def logs_stop() -> None:
        closed.append(True)
        await real_stop()
    monkeypatch.setattr(b.fetchers, "stop", fetchers_fail)
    monkeypatch.setattr(b.replicas, "stop", logs_stop)
    with capture_logs() as events:
        assert await b.stop() is True
    assert closed == [True]
    failures = [e for e in events if e["event"] == "broker.stop_failed"]
    assert len(failures) == 1 and failures[0]["failed_phases"] == ["fetchers"]
    assert failures[0]["log_level"] == "error" and failures[0]["exit_code"] == 0


async def test_a_log_that_cannot_be_closed_fails_the_shutdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = broker(tmp_path)
    part = b.replicas.become_leader("t", 0, [0], 0, [0], 0, 1, 1, None)
    # The second append starts past index.interval.bytes (4096): an index point, so the close must
    # make the index files (it leaves them out of a segment whose log says all they would).
    for _ in range(2):
        assert b.replicas.append(part, build_message_set([(None, b"v" * 5000, 0)]), acks=1).error_code == 0
    real_open = segment_module.os.open

    def no_space(path: object, flags: int, *args: object) -> int:
        if str(path).endswith((".index", ".timeindex")):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, flags, *args)  # type: ignore[arg-type]
    monkeypatch.setattr(segment_module.os, "open", no_space)
    with capture_logs() as events:
        assert await b.stop() is False
    monkeypatch.undo()
    failures = [e for e in events if e["event"] == "broker.stop_failed"]
    assert len(failures) == 1 and failures[0]["failed_phases"] == ["logs"] and failures[0]["log_close_errors"] >= 1
    assert failures[0]["exit_code"] == 1
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # the next start recovers


async def test_a_controlled_shutdown_that_gives_up_is_not_a_failed_shutdown(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka 2.8 proceeds with an unclean shutdown when its controlled-shutdown attempts fail.
    cfg = build_config({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path),
                        "listeners": "PLAINTEXT://127.0.0.1:0"})
    b = Broker(cfg)

    async def controller_unreachable() -> None:
        raise ConnectionRefusedError("no controller")
    monkeypatch.setattr(b, "controlled_shutdown", controller_unreachable)
    with capture_logs() as events:
        assert await b.stop() is True
    assert [e for e in events if e["event"] == "broker.stop_step_failed"][0]["step"] == "controlled_shutdown"
    failures = [e for e in events if e["event"] == "broker.stop_failed"]
    assert failures[0]["failed_phases"] == ["controlled_shutdown"] and failures[0]["exit_code"] == 0
