"""The group APIs on the wire of a real broker (issue 18's bad input and the version-specific shapes).

One broker, its own ZooKeeper, the project's own client speaking each API at chosen versions:
each bad request gets Kafka's error for that request and disturbs no other group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.consumer_protocol import encode_assignment, encode_subscription
from protocol.errors import ErrorCode as E
from tests.support.brokers import BrokerProcess
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect

pytestmark = pytest.mark.integration

SUB = encode_subscription(["t"])


@pytest.fixture
def group_broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(0, offsets_topic_num_partitions="3", offsets_topic_replication_factor="1",
                          group_initial_rebalance_delay_ms="0")


async def _coordinator(broker: BrokerProcess, group: str) -> KafkaConnection:
    conn = await connect(broker)

    async def found() -> bool:
        resp = await conn.request(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
        return resp["error_code"] == 0
    await wait_for(f"a coordinator for {group}", found, timeout=30, interval=0.2)

    async def loaded() -> bool:  # the partition's load done: the group answers something else
        resp = await conn.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None,
                                                           "require_stable": False})
        return resp["error_code"] == 0
    await wait_for(f"{group}'s partition loaded", loaded, timeout=30, interval=0.2)
    return conn


async def _join(conn: KafkaConnection, group: str, member_id: str = "", version: int = 7,
                session: int = 10000, protocol_type: str = "consumer", instance: str | None = None) -> dict[str, Any]:
    body = {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": 5000, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": SUB}]}
    return await conn.request(ApiKey.JOIN_GROUP, version, body, 30)


async def _member(conn: KafkaConnection, group: str) -> tuple[str, int]:
    """A one-member Stable group: (member id, generation)."""
    first = await _join(conn, group)
    assert first["error_code"] == E.MEMBER_ID_REQUIRED
    joined = await _join(conn, group, first["member_id"])
    assert joined["error_code"] == 0 and joined["leader"] == first["member_id"]
    member, gen = joined["member_id"], joined["generation_id"]
    synced = await conn.request(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": gen, "member_id": member, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": encode_assignment({"t": [0, 1]})}]}, 30)
    assert synced["error_code"] == 0 and synced["assignment"] == encode_assignment({"t": [0, 1]})
    assert (synced["protocol_type"], synced["protocol_name"]) == ("consumer", "range")
    return member, gen


async def test_bad_requests_get_kafkas_errors_and_disturb_no_other_group(group_broker: BrokerProcess) -> None:
    await create_topic(group_broker, "t", 2)
    conn = await _coordinator(group_broker, "g1")
    try:
        bystander, bystander_gen = await _member(conn, "g1")
        member, gen = await _member(await _coordinator(group_broker, "g2"), "g2")

        assert (await _join(conn, "g3", session=1000))["error_code"] == E.INVALID_SESSION_TIMEOUT
        assert (await _join(conn, "g3", session=1_800_001))["error_code"] == E.INVALID_SESSION_TIMEOUT
        assert (await _join(conn, ""))["error_code"] == E.INVALID_GROUP_ID
        assert (await _join(conn, "g1", member_id="stranger"))["error_code"] == E.UNKNOWN_MEMBER_ID
        assert (await _join(conn, "g1", protocol_type="connect"))["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
        hb = await conn.request(ApiKey.HEARTBEAT, 4, {"group_id": "g1", "generation_id": bystander_gen + 5,
                                                      "member_id": bystander, "group_instance_id": None})
        assert hb["error_code"] == E.ILLEGAL_GENERATION
        hb = await conn.request(ApiKey.HEARTBEAT, 0, {"group_id": "g1", "generation_id": bystander_gen,
                                                      "member_id": "stranger"})
        assert hb["error_code"] == E.UNKNOWN_MEMBER_ID
        sync = await conn.request(ApiKey.SYNC_GROUP, 5, {
            "group_id": "g1", "generation_id": bystander_gen, "member_id": bystander, "group_instance_id": None,
            "protocol_type": None, "protocol_name": None, "assignments": []})
        assert sync["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL  # v5 must name both

        commit = await conn.request(ApiKey.OFFSET_COMMIT, 8, {
            "group_id": "g1", "generation_id": bystander_gen, "member_id": bystander, "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": "ok"},
                {"partition_index": 1, "committed_offset": 6, "committed_leader_epoch": -1,
                 "committed_metadata": "x" * 4097}]},
                {"name": "no-such-topic", "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                     "committed_metadata": None}]}]})
        codes = {(t["name"], p["partition_index"]): p["error_code"] for t in commit["topics"] for p in t["partitions"]}
        assert codes == {("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE,
                         ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        stale = await conn.request(ApiKey.OFFSET_COMMIT, 2, {
            "group_id": "g1", "generation_id": bystander_gen + 1, "member_id": bystander, "retention_time_ms": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 9,
                                                    "committed_metadata": ""}]}]})
        assert stale["topics"][0]["partitions"][0]["error_code"] == E.ILLEGAL_GENERATION

        fetched = await conn.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "g1", "topics": None, "require_stable": True})
        assert fetched["error_code"] == 0
        assert [(t["name"], p["partition_index"], p["committed_offset"], p["metadata"])
                for t in fetched["topics"] for p in t["partitions"]] == [("t", 0, 5, "ok")]

        # The other group never noticed.
        g2 = await conn.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g2"], "include_authorized_operations": True})
        described = g2["groups"][0]
        assert described["group_state"] == "Stable" and [m["member_id"] for m in described["members"]] == [member]
        assert described["authorized_operations"] == (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE
        assert await conn.request(ApiKey.HEARTBEAT, 4, {"group_id": "g2", "generation_id": gen, "member_id": member,
                                                         "group_instance_id": None}) == {"throttle_time_ms": 0,
                                                                                        "error_code": 0}
    finally:
        await conn.close()


async def test_old_versions_and_admin_apis(group_broker: BrokerProcess) -> None:
    await create_topic(group_broker, "t", 2)
    conn = await _coordinator(group_broker, "old")
    try:
        # JoinGroup v0: no rebalance timeout, no MEMBER_ID_REQUIRED; the member id comes at once.
        v0 = await conn.request(ApiKey.JOIN_GROUP, 0, {
            "group_id": "old", "session_timeout_ms": 10000, "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": SUB}]}, 30)
        assert v0["error_code"] == 0 and v0["generation_id"] == 1 and v0["protocol_name"] == "range"
        member = v0["member_id"]
        sync = await conn.request(ApiKey.SYNC_GROUP, 0, {"group_id": "old", "generation_id": 1, "member_id": member,
                                                         "assignments": [{"member_id": member, "assignment": b"a"}]})
        assert sync == {"error_code": 0, "assignment": b"a"}
        # OffsetCommit v0 (no generation: a simple commit; this group has a member, so it is refused
        # as a commit from outside the group would be) and v1 with its commit timestamp.
        v0_commit = await conn.request(ApiKey.OFFSET_COMMIT, 0, {"group_id": "old", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 3, "committed_metadata": None}]}]})
        assert v0_commit["topics"][0]["partitions"][0]["error_code"] == E.UNKNOWN_MEMBER_ID
        v1_commit = await conn.request(ApiKey.OFFSET_COMMIT, 1, {"group_id": "old", "generation_id": 1,
                                                                 "member_id": member, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 4, "commit_timestamp": 1234,
                                          "committed_metadata": None}]}]})
        assert v1_commit["topics"][0]["partitions"][0]["error_code"] == 0
        fetch_v1 = await conn.request(ApiKey.OFFSET_FETCH, 1, {"group_id": "old", "topics": [
            {"name": "t", "partition_indexes": [0, 1]}]})
        assert [(p["partition_index"], p["committed_offset"], p["error_code"])
                for p in fetch_v1["topics"][0]["partitions"]] == [(0, 4, 0), (1, -1, 0)]

        listed = await conn.request(ApiKey.LIST_GROUPS, 4, {"states_filter": ["Stable"]})
        assert ("old", "consumer", "Stable") in [(g["group_id"], g["protocol_type"], g["group_state"])
                                                 for g in listed["groups"]]
        assert (await conn.request(ApiKey.LIST_GROUPS, 4, {"states_filter": ["Dead"]}))["groups"] == []
        deleted = await conn.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["old", "never", "old"]})
        assert deleted["results"] == [{"group_id": "old", "error_code": E.NON_EMPTY_GROUP},
                                      {"group_id": "never", "error_code": E.GROUP_ID_NOT_FOUND}]
        off_del = await conn.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "old", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]}]})
        assert off_del["topics"][0]["partitions"][0]["error_code"] == E.GROUP_SUBSCRIBED_TO_TOPIC

        # LeaveGroup v0 (one error) and v3 (per member).
        v0_leave = await conn.request(ApiKey.LEAVE_GROUP, 0, {"group_id": "old", "member_id": "stranger"})
        assert v0_leave == {"error_code": E.UNKNOWN_MEMBER_ID}
        v3_leave = await conn.request(ApiKey.LEAVE_GROUP, 3, {"group_id": "old", "members": [
            {"member_id": member, "group_instance_id": None}, {"member_id": "stranger", "group_instance_id": None}]})
        assert v3_leave["error_code"] == 0
        assert [m["error_code"] for m in v3_leave["members"]] == [0, E.UNKNOWN_MEMBER_ID]

        described = await conn.request(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["old"]})
        assert described["groups"][0]["group_state"] == "Empty"
        deleted = await conn.request(ApiKey.DELETE_GROUPS, 0, {"groups_names": ["old"]})
        assert deleted["results"] == [{"group_id": "old", "error_code": 0}]
        gone = await conn.request(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["old"]})
        assert gone["groups"][0]["group_state"] == "Dead"
        after = await conn.request(ApiKey.OFFSET_FETCH, 1, {"group_id": "old", "topics": [
            {"name": "t", "partition_indexes": [0]}]})
        assert after["topics"][0]["partitions"][0]["committed_offset"] == -1

        # A simple consumer (generation -1, no members): OffsetDelete removes what it names only.
        simple = await conn.request(ApiKey.OFFSET_COMMIT, 2, {
            "group_id": "old", "generation_id": -1, "member_id": "", "retention_time_ms": -1, "topics": [
                {"name": "t", "partitions": [{"partition_index": i, "committed_offset": 10 + i,
                                              "committed_metadata": ""} for i in (0, 1)]}]})
        assert [p["error_code"] for p in simple["topics"][0]["partitions"]] == [0, 0]
        off_del = await conn.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "old", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]}, {"name": "nope", "partitions": [
                {"partition_index": 0}]}]})
        assert [(t["name"], t["partitions"][0]["error_code"]) for t in off_del["topics"]] == [
            ("t", 0), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION)]
        left = await conn.request(ApiKey.OFFSET_FETCH, 3, {"group_id": "old", "topics": None})
        assert [(p["partition_index"], p["committed_offset"]) for t in left["topics"] for p in t["partitions"]] == [
            (1, 11)]
    finally:
        await conn.close()
