"""The project's own command-line tools (`python -m broker <command>`), run as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def minibroker(command: str, *args: str, timeout: float = 90, check: bool = False,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`minibroker <command> <args>` from the project root; output captured as text; `env` adds variables."""
    return subprocess.run([sys.executable, "-m", "broker", command, *args], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=timeout, check=check, env={**os.environ, **env} if env else None)


def topics(bootstrap: str, *args: str, timeout: float = 90, check: bool = False) -> subprocess.CompletedProcess[str]:
    return minibroker("topics", "--bootstrap-server", bootstrap, *args, timeout=timeout, check=check)


def configs(zk_connect: str, *args: str, timeout: float = 60, check: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return minibroker("configs", "--zookeeper", zk_connect, *args, timeout=timeout, check=check, env=env)


def reassign(zk_connect: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return minibroker("reassign", "--zookeeper", zk_connect, *args, timeout=timeout)


def groups(bootstrap: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return minibroker("groups", "--bootstrap-server", bootstrap, *args, timeout=timeout)


def table_rows(text: str) -> list[list[str]]:
    """The whitespace-separated cells of each non-blank line of a tool's table output."""
    return [line.split() for line in text.splitlines() if line.strip()]
