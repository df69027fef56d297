"""The broker's state in a file, for a container's health check to report.

Written only where `MINIBROKER_HEALTH_FILE` names a path (the image sets it): a broker waiting
for ZooKeeper has no listener yet, so the probe (broker/tools/probe.py) could only say
"connection refused"; with this file it says why.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HEALTH_FILE_ENV = "MINIBROKER_HEALTH_FILE"


class HealthFile:
    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None

    def write(self, state: str) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(f"{state} (at {time.strftime('%H:%M:%S', time.gmtime())} UTC)\n")
            os.replace(tmp, self.path)
        except OSError:
            pass  # the health file is a courtesy: never a reason to stop


def read_health(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None
