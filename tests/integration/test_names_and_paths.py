"""Names from the wire never reach the filesystem or ZooKeeper unchecked (issue 15, names and paths).

Each test is a reproduction from the probe: a plain client forges the controller's requests
(LeaderAndIsr, StopReplica) with a topic name that is a path, and the broker must neither delete
nor create anything outside `log.dirs`. The forger here knows the broker's epoch and the
controller epoch (read from ZooKeeper), so the epoch checks (KIP-380) let the request through and
it is the name check that must hold on its own. The rest: DeleteTopics
with an empty name, and Kafka's persistent znodes after start on a fresh chroot.
"""

from __future__ import annotations

from pathlib import Path

from broker.zk import layout as L
from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.topics import create_topic
from tests.support.wire import connect, produce
from tests.support.zookeeper import zk_connect


async def _epochs(zk_connect_string: str, broker_id: int) -> tuple[int, int]:
    """The controller epoch and the broker's epoch, so the forged request is not refused as stale."""
    async with zk_connect(zk_connect_string) as zk:
        data, _ = await zk.get(L.CONTROLLER_EPOCH)
        return int(data.decode()), await zk.czxid(L.broker_path(broker_id))


async def _forged_stop_replica(conn: KafkaConnection, epochs: tuple[int, int],
                               partitions: list[tuple[str, int]]) -> dict:
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    return await conn.request(ApiKey.STOP_REPLICA, 1, {
        "controller_id": 0, "controller_epoch": epochs[0], "broker_epoch": epochs[1], "delete_partitions": True,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]})


async def _forged_leader_and_isr(conn: KafkaConnection, epochs: tuple[int, int], broker_id: int, port: int,
                                 partitions: list[tuple[str, int]]) -> dict:
    return await conn.request(ApiKey.LEADER_AND_ISR, 2, {
        "controller_id": broker_id, "controller_epoch": epochs[0], "broker_epoch": epochs[1],
        "topic_states": [{"topic_name": t, "partition_states": [{
            "topic_name": t, "partition_index": p, "controller_epoch": epochs[0], "leader": broker_id,
            "leader_epoch": 1, "isr": [broker_id], "partition_epoch": 0, "replicas": [broker_id]}]}
            for t, p in partitions],
        "live_leaders": [{"broker_id": broker_id, "host_name": "127.0.0.1", "port": port}]})


def _errors(resp: dict) -> dict[tuple[str, int], int]:
    return {(e["topic_name"], e["partition_index"]): e["error_code"] for e in resp["partition_errors"]}


async def test_forged_stop_replica_cannot_delete_outside_log_dirs(tmp_path: Path, zk_server, broker) -> None:  # noqa: ANN001
    # Two victims outside log.dirs: one named by an absolute path, one by "..".
    absolute = tmp_path / "outside" / "victim"
    relative_victim = tmp_path / "rel-0"  # log.dirs is tmp_path/logs-0, so "../rel" partition 0 lands here
    for d in (absolute.parent / "victim-0", relative_victim):
        d.mkdir(parents=True)
        (d / "precious.txt").write_text("keep me")
    async with await connect(broker) as conn:
        await create_topic(conn, "legal")  # also makes sure a controller has been elected
        epochs = await _epochs(zk_server.connect_string, broker.broker_id)
        resp = await _forged_stop_replica(conn, epochs, [(str(absolute), 0), ("../rel", 0), ("ok", -1)])
    assert (absolute.parent / "victim-0" / "precious.txt").read_text() == "keep me"
    assert (relative_victim / "precious.txt").read_text() == "keep me"
    assert resp["error_code"] == 0
    errors = _errors(resp)
    assert errors[(str(absolute), 0)] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert errors[("../rel", 0)] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert errors[("ok", -1)] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "Traceback" not in broker.log()


async def test_forged_leader_and_isr_then_produce_creates_nothing_outside_log_dirs(
        tmp_path: Path, zk_server, broker) -> None:  # noqa: ANN001
    absolute = tmp_path / "outside" / "planted"
    mine = (broker.log_dir,)  # the broker's log dir changes anyway (ZooKeeper's data is outside tmp_path)

    def outside() -> set[Path]:
        return {p for p in tmp_path.rglob("*") if not any(p.is_relative_to(d) for d in mine)}

    before = outside()
    names = [str(absolute), "../planted", "a/b"]
    async with await connect(broker) as conn:
        await create_topic(conn, "legal")
        epochs = await _epochs(zk_server.connect_string, broker.broker_id)
        resp = await _forged_leader_and_isr(conn, epochs, broker.broker_id, broker.port, [(n, 0) for n in names])
        produced = {name: (await produce(conn, name, 0, [(b"k", b"client bytes")]))["error_code"] for name in names}
        # The broker still serves its legal topic.
        ok = await produce(conn, "legal", 0, [(b"k", b"v")])
    created = {p for p in outside() - before if not p.name.startswith(("broker-", "server-"))}
    assert created == set(), created
    # Inside log.dirs, only the legal topic's partition directory exists.
    assert sorted(p.name for p in broker.log_dir.iterdir() if p.is_dir()) == ["legal-0"]
    assert resp["error_code"] == 0
    assert _errors(resp) == {(name, 0): ErrorCode.INVALID_TOPIC_EXCEPTION for name in names}
    assert set(produced.values()) <= {ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}, produced
    assert ok["error_code"] == 0


async def test_delete_topics_empty_name_is_refused(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "kept")
        for version in (0, 5):
            resp = await conn.request(ApiKey.DELETE_TOPICS, version,
                                      {"topic_names": ["", "..", "no-such-topic"], "timeout_ms": 1000})
            codes = {r["name"]: r["error_code"] for r in resp["responses"]}
            # Kafka 2.8 (KafkaApis.handleDeleteTopicsRequest) answers a name it does not
            # know, legal or not, with UNKNOWN_TOPIC_OR_PARTITION; never success.
            assert codes == {"": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "..": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}, (version, resp)
        md = await conn.request(ApiKey.METADATA, 1, {"topics": None})
        assert {t["name"] for t in md["topics"]} == {"kept"}


async def test_persistent_zk_paths_exist_after_start(tmp_path: Path, zk_server, broker_factory) -> None:  # noqa: ANN001
    chroot = "/fresh-chroot"
    broker_factory(0, zookeeper_connect=zk_server.connect_string + chroot)
    wanted = ["/consumers", "/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/changes",
              "/config/topics", "/config/clients", "/config/users", "/config/brokers", "/config/ips",
              "/admin/delete_topics",
              "/isr_change_notification", "/latest_producer_id_block", "/log_dir_event_notification"]
    async with zk_connect(zk_server, chroot=chroot) as zk:
        missing = [p for p in wanted if not await zk.exists(p)]
    assert missing == []
