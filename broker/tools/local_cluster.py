"""`minibroker cluster up|status|down`: a local ZooKeeper and N broker processes in the background.

Everything lives under one directory (default `./.minibroker`): each broker's
server.properties, log dirs and output, the ZooKeeper data, and `cluster.json`, which
records the processes this command started so that `down` stops exactly those.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STATE = "cluster.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _load(d: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((d / STATE).read_text())  # written by this module
        return state
    except (OSError, ValueError):
        return None


def _in_use(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def up(d: Path, brokers: int, zookeeper: str | None, base_port: int) -> int:
    d = d.resolve()
    d.mkdir(parents=True, exist_ok=True)
    state = _load(d)
    if state and any(_alive(b["pid"]) for b in state["brokers"]):
        print(f"a cluster is already running from {d}; `minibroker cluster status --dir {d}`", file=sys.stderr)
        return 1
    zk_state: dict[str, Any] = {"connect": zookeeper, "pid": None}
    if zookeeper is None:
        from broker.zk.server import ZooKeeperServer
        # ZooKeeper's usual port when it is free, so Kafka habits (`--zookeeper 127.0.0.1:2181`) work.
        zk = ZooKeeperServer(d / "zookeeper", port=0 if _in_use(2181) else 2181)
        zk_state["pid"] = zk.start_detached()
        zk_state["connect"] = zk.connect_string
    state = {"zookeeper": zk_state, "brokers": []}
    for i in range(brokers):
        port = base_port + i
        if _port_open("127.0.0.1", port):
            print(f"port {port} is already in use; pass --base-port", file=sys.stderr)
            down_state(state)
            return 1
        bdir = d / f"broker-{i}"
        bdir.mkdir(exist_ok=True)
        props = bdir / "server.properties"
        props.write_text(
            f"broker.id={i}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
            f"log.dirs={bdir / 'logs'}\n"
            f"zookeeper.connect={zk_state['connect']}\n"
            f"metrics.listener=http://127.0.0.1:{9404 + i}\n")
        out = open(bdir / "broker.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "broker", "serve", str(props)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(bdir))
        state["brokers"].append({"id": i, "pid": proc.pid, "port": port, "log": str(bdir / "broker.log")})
    (d / STATE).write_text(json.dumps(state, indent=2))
    deadline = time.monotonic() + 30
    for b in state["brokers"]:
        while not _port_open("127.0.0.1", b["port"]):
            if not _alive(b["pid"]) or time.monotonic() > deadline:
                print(f"broker {b['id']} did not start; see {b['log']}", file=sys.stderr)
                down(d)
                return 1
            time.sleep(0.1)
    print("bootstrap.servers=" + ",".join(f"127.0.0.1:{b['port']}" for b in state["brokers"]))
    print(f"zookeeper.connect={zk_state['connect']}")
    return 0


def status(d: Path) -> int:
    state = _load(d.resolve())
    if state is None:
        print("no cluster state here; `minibroker cluster up` first")
        return 1
    zk = state["zookeeper"]
    ok = True
    zk_alive = zk["pid"] is None or _alive(zk["pid"])
    ok &= zk_alive
    print(f"zookeeper {zk['connect']} {'up' if zk_alive else 'DOWN'}")
    for b in state["brokers"]:
        alive = _alive(b["pid"]) and _port_open("127.0.0.1", b["port"])
        ok &= alive
        print(f"broker {b['id']} 127.0.0.1:{b['port']} pid {b['pid']} {'up' if alive else 'DOWN'}")
    return 0 if ok else 1


def _stop(pid: int, timeout: float = 20) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def down_state(state: dict[str, Any]) -> None:
    for b in state["brokers"]:
        _stop(b["pid"])
    if state["zookeeper"]["pid"]:
        _stop(state["zookeeper"]["pid"], 5)


def down(d: Path) -> int:
    d = d.resolve()
    state = _load(d)
    if state is None:
        print("no cluster state here; nothing to stop")
        return 0
    down_state(state)
    (d / STATE).unlink(missing_ok=True)
    print("cluster stopped")
    return 0
