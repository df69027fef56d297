"""Named listeners on real broker processes, and a broker started before its ZooKeeper.

Two listeners per broker: INTERNAL (inter-broker) and EXTERNAL, advertised under another host
name. Metadata answers with the endpoints of the listener the client connected to, replication
runs on INTERNAL, and /brokers/ids/<id> holds both endpoints in Kafka's JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from broker.zk.client import ZkClient
from broker.zk.server import ZooKeeperServer
from protocol.api_keys import ApiKey
from tests.support.brokers import BrokerProcess, start_together
from tests.support.ports import free_port
from tests.support.topics import create_topic, wait_leaders
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration


def _two_listener_broker(workdir: Path, broker_id: int, zk: str) -> tuple[BrokerProcess, int]:
    external = free_port()
    b = BrokerProcess(workdir, broker_id, zk, {
        "listeners": f"INTERNAL://127.0.0.1:{free_port()},EXTERNAL://127.0.0.1:{external}",
        # "localhost" for EXTERNAL: another name for the same interface, so the test can tell them apart.
        "advertised.listeners": "",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "replica.fetch.wait.max.ms": "100",
        "min.insync.replicas": "2",
    })
    internal_port = int(b.props.read_text().split("INTERNAL://127.0.0.1:")[1].split(",")[0])
    props = b.props.read_text().replace(
        "advertised.listeners=\n",
        f"advertised.listeners=INTERNAL://127.0.0.1:{internal_port},EXTERNAL://localhost:{external}\n")
    b.props.write_text(props)
    b.port = internal_port  # BrokerProcess.bootstrap: the inter-broker listener
    return b, external


async def test_metadata_answers_with_the_clients_listener(tmp_path: Path, zk_server: ZooKeeperServer) -> None:
    brokers = [_two_listener_broker(tmp_path, i, zk_server.connect_string) for i in (1, 2)]
    start_together([b for b, _ in brokers])
    try:
        internal = {b.broker_id: b.port for b, _ in brokers}
        external = {b.broker_id: port for b, port in brokers}
        conn = await connect(f"127.0.0.1:{external[1]}")
        try:
            await create_topic(conn, "named", partitions=1, replication_factor=2)
            await wait_leaders(conn, "named", 1)
            md = await conn.request(ApiKey.METADATA, 1, {"topics": None})
            assert sorted((b["node_id"], b["host"], b["port"]) for b in md["brokers"]) == [
                (1, "localhost", external[1]), (2, "localhost", external[2])]
            leader = md["topics"][0]["partitions"][0]["leader_id"]
        finally:
            await conn.close()
        conn = await connect(f"127.0.0.1:{external[leader]}")
        try:
            # Written through EXTERNAL, replicated over INTERNAL: acks=all needs both replicas,
            # min.insync.replicas=2 refuses it if the follower does not fetch.
            resp = await produce(conn, "named", 0, [(None, b"v%d" % i) for i in range(10)], acks=-1)
            assert resp["error_code"] == 0
        finally:
            await conn.close()
        conn = await connect(f"127.0.0.1:{internal[2]}")
        try:
            md = await conn.request(ApiKey.METADATA, 1, {"topics": None})
            assert sorted((b["node_id"], b["host"], b["port"]) for b in md["brokers"]) == [
                (1, "127.0.0.1", internal[1]), (2, "127.0.0.1", internal[2])]
        finally:
            await conn.close()
        zk = ZkClient(zk_server.connect_string)
        await zk.start()
        try:
            data, _ = await zk.get("/brokers/ids/1")
        finally:
            await zk.close()
        body = json.loads(data)
        assert body["endpoints"] == [f"INTERNAL://127.0.0.1:{internal[1]}", f"EXTERNAL://localhost:{external[1]}"]
        assert body["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "PLAINTEXT"}
    finally:
        for b, _ in brokers:
            b.kill()


def test_broker_waits_for_a_missing_zookeeper(tmp_path: Path) -> None:
    """Started with no ZooKeeper: it stays up, says so, and starts once ZooKeeper comes."""
    zk = ZooKeeperServer(tmp_path / "zookeeper")  # port chosen, server not started yet
    b = BrokerProcess(tmp_path, 0, zk.connect_string)
    b.start(wait=False)
    try:
        deadline = time.monotonic() + 40
        while "broker.zookeeper_unreachable" not in b.log():
            assert b.proc is not None and b.proc.poll() is None, b.log()
            assert time.monotonic() < deadline, b.log()
            time.sleep(0.2)
        assert b.proc is not None and b.proc.poll() is None, b.log()
        zk.start()
        b.wait_ready(60)
    finally:
        b.kill()
        zk.stop()


def test_bad_listener_settings_exit_naming_the_key(tmp_path: Path, zk_server: ZooKeeperServer) -> None:
    b = BrokerProcess(tmp_path, 0, zk_server.connect_string, {"inter.broker.listener.name": "REPLICATION"})
    b.start(wait=False)
    assert b.proc is not None
    assert b.proc.wait(30) != 0
    assert "inter.broker.listener.name" in b.log()
