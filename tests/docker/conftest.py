"""The compose cluster across containers (docker/docker-compose.yml), one Compose project per test.

Skipped where no Docker engine runs (`scripts/run test` installs and starts one, and builds the
image). A session-start sweep removes what interrupted earlier runs left; every test's project
is taken down with its volumes, pass or fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.compose import ComposeCluster, build_image, docker_available, sweep_leftovers
from tests.support.fault_checker import TABLE_HEAD, Verdict

VERDICTS: list[Verdict] = []


@pytest.fixture(scope="session")
def compose_image() -> str:
    why = docker_available()
    if why is not None:
        pytest.skip(f"docker tests need a Docker engine and Compose: {why} (scripts/run test sets them up)")
    swept = sweep_leftovers()
    if swept:
        print(f"removed leftovers of earlier runs: {swept}")
    return build_image()


@pytest.fixture
def compose_cluster(compose_image: str, tmp_path: Path) -> Iterator[ComposeCluster]:
    """ZooKeeper + three brokers, healthy; taken down with its volumes at the end, whatever happened."""
    cluster = ComposeCluster(compose_image, tmp_path)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def fault_table() -> list[Verdict]:
    return VERDICTS


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if VERDICTS:
        terminalreporter.write_line("")
        terminalreporter.write_line("fault suite (tests/docker): acks=all, RF=3, min.insync.replicas=2")
        terminalreporter.write_line(TABLE_HEAD)
        for v in VERDICTS:
            terminalreporter.write_line(v.row())
