"""Free TCP ports for broker listeners and metrics endpoints."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port() -> int:
    """A port that is free now and stays out of the kernel's ephemeral range.

    A port the kernel hands out (bind to 0) can be handed out again as the local port of some
    client connection before the broker binds it; choosing below the ephemeral range avoids
    that race between picking and binding.
    """
    low, _ = _ephemeral_range()
    while True:
        port = random.randrange(10000, min(low, 32768))
        if port in _handed_out:
            continue  # picked earlier for a process that may not have bound it yet
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return port


_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999
