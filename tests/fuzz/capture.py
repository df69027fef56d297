"""Regenerate the seed corpus: `python -m tests.fuzz.capture [--out DIR]`.

Starts a throwaway ZooKeeper and one broker that advertises a recording proxy's port, runs
each real client through the proxy (kcat, confluent-kafka, kafka-python, aiokafka, KafkaJS,
the project's own tools and connection), and keeps up to `PER_KIND` distinct small frames per
(API, version, client) of every served API. The broker's controller talks to itself through
the proxy too (client "broker"). APIs no client sends get seeds built with the project's
codecs from the declarations (client "codec").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import broker.apis  # noqa: F401 - registers every served API
from broker.apis.registry import registered
from broker.zk.server import ZooKeeperServer
from protocol.api_keys import ApiKey
from protocol.headers import encode_request_header
from protocol.schema import request_codec
from tests.fuzz.seeds import SEED_DIR, seed_file_name
from tests.support.brokers import BrokerProcess
from tests.support.recording import Recorded, RecordingProxy
from tests.support.wire import connect

PER_KIND = 2
MAX_SEED_BYTES = 32 << 10
NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"
INTER_BROKER = (ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN)
MESSAGES = [(f"key-{i}", f"value-{i}-" + "x" * (i % 7)) for i in range(5)]


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- the clients, each against `bootstrap` (the proxy) ----------------------------------------

def kcat(bootstrap: str) -> None:
    subprocess.run(["kcat", "-b", bootstrap, "-L"], check=True, capture_output=True, timeout=30)
    data = "".join(f"{k}\t{v}\n" for k, v in MESSAGES)
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "cap-kcat", "-p", "0", "-K", "\t", "-X", "acks=all"],
                   input=data.encode(), check=True, capture_output=True, timeout=30)
    subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "cap-kcat", "-p", "0", "-o", "beginning", "-e", "-q"],
                   check=True, capture_output=True, timeout=30)


def confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("cap-confluent-admin", 1, 1)]).values():
        f.result(30)
    for f in admin.create_partitions([NewPartitions("cap-confluent-admin", 2)]).values():
        f.result(30)
    admin.list_topics(timeout=10)
    for f in admin.delete_topics(["cap-confluent-admin"]).values():
        f.result(30)
    confluent_configs(admin)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": False})
    for k, v in MESSAGES:
        p.produce("cap-confluent", v.encode(), key=k.encode(), partition=0)
    assert p.flush(30) == 0
    confluent_group(bootstrap, admin)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.get_watermark_offsets(TopicPartition("cap-confluent", 0), timeout=10)
    c.assign([TopicPartition("cap-confluent", 0, 0)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is not None and m.error().code() == -191:  # partition EOF
            break
    c.close()


def confluent_group(bootstrap: str, admin: Any) -> None:  # noqa: ANN401
    """A subscribed member (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetCommit/Fetch,
    LeaveGroup), then the group admin calls (ListGroups, DescribeGroups, DeleteGroups)."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cap-g-confluent", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "heartbeat.interval.ms": 500})
    c.subscribe(["cap-confluent"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not c.assignment():
        c.poll(0.2)
    for _ in range(10):
        c.poll(0.2)
    c.commit(offsets=[TopicPartition("cap-confluent", 0, 1)], asynchronous=False)
    c.close()
    admin.list_consumer_groups().result(30)
    for f in admin.describe_consumer_groups(["cap-g-confluent"]).values():
        f.result(30)
    for f in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("cap-g-confluent")]).values():
        f.result(30)
    for f in admin.delete_consumer_groups(["cap-g-confluent"]).values():
        f.result(30)


def confluent_configs(admin: Any) -> None:  # noqa: ANN401
    """DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and DescribeCluster as librdkafka sends them."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    topic = "cap-confluent-configs"
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "60000"})]).values():
        f.result(30)
    for f in admin.describe_configs([ConfigResource("topic", topic), ConfigResource("broker", "0")]).values():
        f.result(30)
    ops = [ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)]
    for f in admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=ops)]).values():
        f.result(30)
    for f in admin.alter_configs([ConfigResource("topic", topic, set_config={"retention.ms": "2000"})]).values():
        f.result(30)
    admin.describe_cluster(include_authorized_operations=True).result(30)
    for f in admin.delete_topics([topic]).values():
        f.result(30)


def kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("cap-kafka-python-admin", 1, 1)])
    admin.create_partitions({"cap-kafka-python-admin": NewPartitions(2)})
    admin.delete_topics(["cap-kafka-python-admin"])
    kafka_python_configs(admin)
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for k, v in MESSAGES:
        p.send("cap-kafka-python", v.encode(), key=k.encode(), partition=0)
    p.flush(30)
    p.close()
    g = KafkaConsumer("cap-kafka-python", bootstrap_servers=bootstrap, group_id="cap-g-kafka-python",
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    next(iter(g), None)
    g.commit()
    g.close()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.list_groups()
    admin.describe_groups(["cap-g-kafka-python"])
    admin.list_group_offsets({"cap-g-kafka-python": None})
    admin.delete_group_offsets("cap-g-kafka-python", [TopicPartition("cap-kafka-python", 0)])
    admin.delete_groups(["cap-g-kafka-python"])
    admin.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition("cap-kafka-python", 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    for n, _ in enumerate(c, 1):
        if n == len(MESSAGES):
            break
    c.close()


def kafka_python_configs(admin: Any) -> None:  # noqa: ANN401
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    admin.create_topics([NewTopic("cap-kafka-python-configs", 1, 1, topic_configs={"retention.ms": "60000"})])
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cap-kafka-python-configs")], config_filter="all")
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "cap-kafka-python-configs",
                                        configs={"retention.ms": "1000"})])
    admin.delete_topics(["cap-kafka-python-configs"])


def aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await p.start()
        try:
            for k, v in MESSAGES:
                await p.send_and_wait("cap-aiokafka", v.encode(), key=k.encode(), partition=0)
        finally:
            await p.stop()
        g = AIOKafkaConsumer("cap-aiokafka", bootstrap_servers=bootstrap, group_id="cap-g-aiokafka",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await g.start()
        try:
            await g.getmany(timeout_ms=5000)
            await g.commit()
        finally:
            await g.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition("cap-aiokafka", 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            await c.getmany(tp, timeout_ms=3000)
        finally:
            await c.stop()

    asyncio.run(run())


def kafkajs(bootstrap: str) -> None:
    if not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
        _log("KafkaJS is not installed under tests/clients/node: skipped")
        return
    # produce.js does not let KafkaJS create topics (allowAutoTopicCreation: false, which Metadata v4+ honours).
    subprocess.run([sys.executable, "-m", "broker", "topics", "--bootstrap-server", bootstrap, "--create",
                    "--topic", "cap-kafkajs", "--partitions", "1", "--replication-factor", "1"],
                   check=True, capture_output=True, timeout=60)
    subprocess.run(["node", str(NODE_DIR / "produce.js"), bootstrap, "cap-kafkajs", "-1", "none"],
                   input=json.dumps(MESSAGES).encode(), check=True, capture_output=True, timeout=60)
    subprocess.run(["node", str(NODE_DIR / "admin.js"), bootstrap, "cap-kafkajs-admin", "0"],
                   check=True, capture_output=True, timeout=60)
    member = subprocess.Popen(["node", str(NODE_DIR / "group_consume.js"), bootstrap, "cap-kafkajs", "cap-g-kafkajs"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(8)  # join (the initial rebalance delay), sync, fetch, commit, heartbeat
    member.terminate()
    member.wait(30)


def tools(bootstrap: str) -> None:
    run = [sys.executable, "-m", "broker", "topics", "--bootstrap-server", bootstrap]
    for args in (["--create", "--topic", "cap-tools", "--partitions", "1", "--replication-factor", "1"],
                 ["--alter", "--topic", "cap-tools", "--partitions", "2"],
                 ["--describe", "--topic", "cap-tools"], ["--list"], ["--delete", "--topic", "cap-tools"]):
        subprocess.run(run + args, check=True, capture_output=True, timeout=60)


def fetcher(bootstrap: str) -> None:
    """The project's connection: every version of the data-path APIs, and a follower's Fetch v3."""

    async def run() -> None:
        async with await connect(bootstrap, client_id="fetcher") as conn:
            for v in range(4):
                await conn.request(ApiKey.API_VERSIONS, v, {})
            for v in range(3):
                await conn.request(ApiKey.METADATA, v, {"topics": [{"name": "cap-kcat"}]})
            for v in range(2):
                await conn.request(ApiKey.LIST_OFFSETS, v, {"replica_id": -1, "topics": [
                    {"name": "cap-kcat", "partitions": [{"partition_index": 0, "timestamp": -2, "max_num_offsets": 1}]}]})
            for v, replica in ((0, -1), (1, -1), (2, -1), (3, -1), (3, 1)):
                await conn.request(ApiKey.FETCH, v, {"replica_id": replica, "max_wait_ms": 0, "min_bytes": 0,
                                                     "max_bytes": 1 << 20, "topics": [{"topic": "cap-kcat", "partitions": [
                                                         {"partition": 0, "fetch_offset": 0,
                                                          "partition_max_bytes": 1 << 20}]}]})

    asyncio.run(run())


CLIENTS: dict[str, Callable[[str], None]] = {
    "kcat": kcat, "confluent": confluent, "kafka_python": kafka_python, "aiokafka": aiokafka,
    "kafkajs": kafkajs, "tools": tools, "fetcher": fetcher,
}


# ---- seeds the clients never send --------------------------------------------------------------

def codec_seeds() -> list[Recorded]:
    """Inter-broker requests built from the declarations; endpoints are retargeted before a run."""
    state = {"topic_name": "fuzz-seed", "partition_index": 0, "controller_epoch": 1, "leader": 0,
             "leader_epoch": 1, "isr": [0], "partition_epoch": 0, "zk_version": 0, "replicas": [0]}
    bodies: list[tuple[int, int, dict]] = [
        (ApiKey.LEADER_AND_ISR, 0, {"controller_id": 0, "controller_epoch": 1, "ungrouped_partition_states": [state],
                                    "live_leaders": [{"broker_id": 0, "host_name": "127.0.0.1", "port": 9092}]}),
        (ApiKey.STOP_REPLICA, 0, {"controller_id": 0, "controller_epoch": 1, "delete_partitions": False,
                                  "ungrouped_partitions": [{"topic_name": "fuzz-seed", "partition_index": 0}]}),
        (ApiKey.STOP_REPLICA, 0, {"controller_id": 0, "controller_epoch": 1, "delete_partitions": True,
                                  "ungrouped_partitions": [{"topic_name": "fuzz-seed", "partition_index": 0}]}),
        (ApiKey.CONTROLLED_SHUTDOWN, 0, {"broker_id": 7}),
        (ApiKey.CONTROLLED_SHUTDOWN, 1, {"broker_id": 7}),
        # librdkafka and KafkaJS describe the cluster with Metadata; kafka-python 3.0.12 sends
        # DescribeCluster but cannot read a v0 answer (it expects v1's endpoint_type).
        (ApiKey.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": True}),
    ]
    # What a follower asks its leader before it fetches (fetcher/truncation.py sends v3); v4 is
    # the flexible form. A one-broker capture has no follower to record.
    for v in (3, 4):
        bodies.append((ApiKey.OFFSET_FOR_LEADER_EPOCH, v, {"replica_id": 1, "topics": [
            {"topic": "fuzz-seed", "partitions": [{"partition": 0, "current_leader_epoch": 1, "leader_epoch": 0}]}]}))
    for v in range(3):
        broker0 = {"id": 0, "v0_host": "127.0.0.1", "v0_port": 9092, "rack": None,
                   "endpoints": [{"port": 9092, "host": "127.0.0.1", "security_protocol": 0}]}
        bodies.append((ApiKey.UPDATE_METADATA, v, {"controller_id": 0, "controller_epoch": 1,
                                                   "ungrouped_partition_states": [state], "live_brokers": [broker0]}))
    # The ACL APIs: the capture broker has no authorizer (its answers are SECURITY_DISABLED), so
    # the seeds are built here, one per version, with a LITERAL and a PREFIXED binding.
    acl = {"principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}
    acl_filter = {"resource_type_filter": 2, "resource_name_filter": "fuzz-seed", "pattern_type_filter": 3,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    for v in range(3):
        bodies.append((ApiKey.CREATE_ACLS, v, {"creations": [
            {"resource_type": 2, "resource_name": "fuzz-seed", "resource_pattern_type": 3, **acl},
            {"resource_type": 3, "resource_name": "fuzz-", "resource_pattern_type": 4, **acl}]}))
        bodies.append((ApiKey.DESCRIBE_ACLS, v, acl_filter))
        bodies.append((ApiKey.DELETE_ACLS, v, {"filters": [acl_filter]}))
    # Client quotas (KIP-55): neither confluent-kafka nor kafka-python has an admin call for them.
    for v in range(2):
        bodies.append((ApiKey.DESCRIBE_CLIENT_QUOTAS, v, {"strict": False, "components": [
            {"entity_type": "user", "match_type": 0, "match": "alice"},
            {"entity_type": "client-id", "match_type": 1, "match": None}]}))
        bodies.append((ApiKey.ALTER_CLIENT_QUOTAS, v, {"validate_only": False, "entries": [
            {"entity": [{"entity_type": "user", "entity_name": "alice"},
                        {"entity_type": "client-id", "entity_name": None}],
             "ops": [{"key": "producer_byte_rate", "value": 100000.0, "remove": False},
                     {"key": "controller_mutation_rate", "value": 0.0, "remove": True}]}]}))
    # SASL: the capture broker has no SASL listener, so the exchange and the credential APIs are
    # built here (a PLAIN token, a SCRAM client-first, an upsertion with a salted password).
    for v in range(2):
        bodies.append((ApiKey.SASL_HANDSHAKE, v, {"mechanism": "SCRAM-SHA-512"}))
    for v, token in ((0, b"\x00alice\x00alice-secret"), (1, b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"),
                     (2, b"\x00alice\x00alice-secret")):
        bodies.append((ApiKey.SASL_AUTHENTICATE, v, {"auth_bytes": token}))
    bodies.append((ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "alice"}, {"name": "fuzz"}]}))
    bodies.append((ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
        "deletions": [{"name": "fuzz-gone", "mechanism": 1}],
        "upsertions": [{"name": "fuzz", "mechanism": 2, "iterations": 4096, "salt": b"fuzz-salt",
                        "salted_password": bytes(64)}]}))
    out = []
    for key, version, body in bodies:
        frame = encode_request_header(key, version, 1, "codec") + request_codec(key, version).encode(body)
        out.append(Recorded(int(key), version, frame, "codec"))
    return out


def select(recorded: list[Recorded], served: dict[int, tuple[int, int]]) -> dict[str, bytes]:
    """Up to PER_KIND distinct frames per (API, version, client), small ones, of served APIs only."""
    chosen: dict[tuple[int, int, str], list[bytes]] = {}
    for r in recorded:
        # The controller's connection to its own broker was opened while some client ran.
        client = "broker" if r.api_key in INTER_BROKER and r.client != "codec" else r.client
        rng = served.get(r.api_key)
        if rng is None or not rng[0] <= r.api_version <= rng[1] or len(r.frame) > MAX_SEED_BYTES:
            continue
        # The correlation id differs between otherwise equal frames: compare without it.
        kept = chosen.setdefault((r.api_key, r.api_version, client), [])
        if len(kept) < PER_KIND and all(k[8:] != r.frame[8:] for k in kept):
            kept.append(r.frame)
    return {seed_file_name(key, v, client, n): frame
            for (key, v, client), frames in sorted(chosen.items()) for n, frame in enumerate(frames)}


async def record_all(work: Path) -> list[Recorded]:
    zk = ZooKeeperServer(work / "zk")
    zk.start()
    b = None
    proxy = None
    try:
        b = BrokerProcess(work, 0, zk.connect_string, {"auto.create.topics.enable": "true"})
        proxy = RecordingProxy(b.port)
        proxy.client = "broker"
        await proxy.start()
        b.props.write_text(b.props.read_text() + f"advertised.listeners=PLAINTEXT://{proxy.bootstrap}\n")
        await asyncio.to_thread(b.start)
        for name, run in CLIENTS.items():
            proxy.client = name
            _log(f"capturing {name}")
            await asyncio.to_thread(run, proxy.bootstrap)
            await asyncio.sleep(0.5)  # let the last frames of this client through before relabelling
        return list(proxy.recorded)
    finally:
        if proxy is not None:
            await proxy.stop()
        if b is not None:
            b.stop()
        zk.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=SEED_DIR)
    args = ap.parse_args()
    served = {int(a.key): a.versions for a in registered()}
    work = Path(tempfile.mkdtemp(prefix="minibroker-capture-"))
    try:
        recorded = asyncio.run(record_all(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seeds = select(recorded + codec_seeds(), served)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.bin"):
        old.unlink()
    for name, frame in seeds.items():
        (args.out / name).write_bytes(frame)
    kinds = sorted({n.rsplit("-", 2)[0] for n in seeds})
    _log(f"{len(seeds)} seeds of {len(kinds)} API versions in {args.out}: {', '.join(kinds)}")
    missing = sorted(ApiKey(k).name for k in served if not any(
        n.startswith(ApiKey(k).name.lower() + "-v") for n in seeds))
    if missing:
        _log(f"no seed for {missing}")
        sys.exit(1)


if __name__ == "__main__":
    main()
