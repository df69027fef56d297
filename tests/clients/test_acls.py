"""The ACL authorizer with real brokers, real ZooKeeper and confluent-kafka (issue 20, part 4).

Until SASL/TLS land every connection is User:ANONYMOUS, so these tests vary the rules rather than
the principal: the cluster ACLs the brokers need are seeded in ZooKeeper first (as kafka-acls
--authorizer-properties does), then each test grants or withholds what one client action needs.
Principals other than ANONYMOUS are covered by tests/unit/test_acl_matcher.py.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.security.acl import AclOperation as Op
from broker.security.acl import PatternType
from broker.zk.server import ZooKeeperServer
from protocol.api_keys import ApiKey
from tests.support import acls
from tests.support.brokers import BrokerProcess, start_together
from tests.support.metrics import metric
from tests.support.tools import minibroker
from tests.support.wire import connect
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.clients

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1",
              "offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}


class Secured:
    def __init__(self, brokers: list[BrokerProcess], zk: str) -> None:
        self.brokers = brokers
        self.zk = zk  # connect string with the chroot

    @property
    def bootstrap(self) -> str:
        return self.brokers[0].bootstrap


def _brokers(tmp: Path, zk: ZooKeeperServer, count: int, overrides: dict[str, str],
             seed: dict | None = None) -> tuple[list[BrokerProcess], str]:
    connect = zk.connect_string + f"/{tmp.name}"
    if seed:
        async def chroot() -> None:
            async with zk_connect(zk) as client:
                await client.ensure_path(f"/{tmp.name}")
        asyncio.run(chroot())
        acls.seed(connect, seed)
    brokers = [BrokerProcess(tmp, i, connect, overrides, metrics=True) for i in range(count)]
    start_together(brokers)
    return brokers, connect


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[Secured]:
    """Two brokers with the authorizer, allow.everyone.if.no.acl.found=false, no super users."""
    brokers, connect = _brokers(tmp_path_factory.mktemp("acls"), zk_server_session, 2, AUTHORIZER,
                                {acls.CLUSTER: acls.BROKER_CLUSTER_ACLS})
    yield Secured(brokers, connect)
    for b in brokers:
        assert b.stop() == 0, b.log()


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _add(s: Secured, pattern: acls.ResourcePattern, *entries: acls.AclEntry) -> None:
    acls.seed(s.zk, {pattern: list(entries)})


def _produce(bootstrap: str, topic: str, count: int = 3) -> list[KafkaError | None]:
    """Delivery results of `count` messages (None: delivered)."""
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000, "retries": 0,
                  "topic.metadata.refresh.interval.ms": 1000})
    results: list[KafkaError | None] = []
    for i in range(count):
        p.produce(topic, f"m{i}".encode(), on_delivery=lambda err, msg: results.append(err))
    p.flush(30)
    return results


def _wait(what: str, check, timeout: float = 20.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _topic(s: Secured | str, name: str) -> None:
    """CreateTopics with an operation timeout (the broker waits for the leader), through the admin
    client: the project's create_topic helper then polls Metadata, which a topic without a
    Describe ACL never answers."""
    bootstrap = s if isinstance(s, str) else s.bootstrap
    admin = _admin(bootstrap)  # kept alive until the answer: a collected client cancels its futures
    admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=30)[name].result()


# ---- the ACL APIs ------------------------------------------------------------------------------

def test_admin_client_create_describe_delete_acls(secured: Secured) -> None:
    a = _admin(secured.bootstrap)
    literal = AclBinding(ResourceType.TOPIC, "rt-topic", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    prefixed = AclBinding(ResourceType.GROUP, "rt-", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                          AclOperation.DELETE, AclPermissionType.DENY)
    for f in a.create_acls([literal, prefixed]).values():
        f.result()

    # Kafka's layout and JSON, and a notification for each kind.
    async def read() -> tuple[dict, dict, list[str], list[str]]:
        async with zk_connect(secured.zk) as zk:
            lit = json.loads((await zk.get("/kafka-acl/Topic/rt-topic"))[0])
            pre = json.loads((await zk.get("/kafka-acl-extended/prefixed/Group/rt-"))[0])
            return lit, pre, await zk.get_children("/kafka-acl-changes"), \
                await zk.get_children("/kafka-acl-extended-changes")
    lit, pre, changes, extended = asyncio.run(read())
    assert lit == {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                           "operation": "Read", "host": "*"}]}
    assert pre["acls"] == [{"principal": "User:bob", "permissionType": "Deny", "operation": "Delete",
                            "host": "10.0.0.1"}]
    assert any(c.startswith("acl_changes_") for c in changes) and extended

    anything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    found = a.describe_acls(anything).result()
    assert literal in found and prefixed in found
    only_topic = a.describe_acls(AclBindingFilter(ResourceType.TOPIC, "rt-topic", ResourcePatternType.LITERAL, None,
                                                  None, AclOperation.ANY, AclPermissionType.ANY)).result()
    assert only_topic == [literal]
    # MATCH: the prefixed group pattern applies to rt-anything.
    match = a.describe_acls(AclBindingFilter(ResourceType.GROUP, "rt-anything", ResourcePatternType.MATCH, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY)).result()
    assert match == [prefixed]

    deleted = a.delete_acls([AclBindingFilter(ResourceType.ANY, "rt-topic", ResourcePatternType.ANY, None, None,
                                              AclOperation.ANY, AclPermissionType.ANY),
                             AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.PREFIXED, "User:bob",
                                              None, AclOperation.ANY, AclPermissionType.ANY)])
    assert [f.result() for f in deleted.values()] in ([[literal], [prefixed]], [[prefixed], [literal]])
    left = a.describe_acls(anything).result()
    assert literal not in left and prefixed not in left

    async def gone() -> bool:
        async with zk_connect(secured.zk) as zk:
            return not await zk.exists("/kafka-acl/Topic/rt-topic")
    assert asyncio.run(gone())


def test_invalid_acl_requests(secured: Secured) -> None:
    a = _admin(secured.bootstrap)
    # Kafka's validation: the cluster resource is named kafka-cluster.
    bad_cluster = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:x", "*",
                             AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as e:
        next(iter(a.create_acls([bad_cluster]).values())).result()
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST
    anything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                AclPermissionType.ANY)
    assert not [b for b in a.describe_acls(anything).result() if b.name == "not-the-cluster"]


def test_acls_tool_add_list_remove(secured: Secured) -> None:
    base = ("--bootstrap-server", secured.bootstrap)
    added = minibroker("acls", *base, "--add", "--allow-principal", "User:carol", "--operation", "Read",
                       "--operation", "Describe", "--topic", "tool-", "--resource-pattern-type", "prefixed")
    assert added.returncode == 0, added.stderr
    header = "`ResourcePattern(resourceType=TOPIC, name=tool-, patternType=PREFIXED)`"
    assert f"Adding ACLs for resource {header}" in added.stdout
    assert f"Current ACLs for resource {header}" in added.stdout
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in added.stdout
    assert "(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW)" in added.stdout

    listed = minibroker("acls", *base, "--list")
    assert listed.returncode == 0, listed.stderr
    assert f"Current ACLs for resource {header}" in listed.stdout
    assert "name=kafka-cluster, patternType=LITERAL" in listed.stdout  # the seeded cluster ACLs

    # An operation a group does not support is refused before anything is sent (as kafka-acls).
    wrong = minibroker("acls", *base, "--add", "--allow-principal", "User:carol", "--operation", "Write",
                       "--group", "g")
    assert wrong.returncode == 1 and "only supports operations" in wrong.stderr

    removed = minibroker("acls", *base, "--remove", "--force", "--allow-principal", "User:carol", "--operation",
                         "Read", "--topic", "tool-", "--resource-pattern-type", "prefixed")
    assert removed.returncode == 0, removed.stderr
    assert "operation=READ" not in removed.stdout and "operation=DESCRIBE" in removed.stdout
    minibroker("acls", *base, "--remove", "--force", "--topic", "tool-", "--resource-pattern-type", "prefixed")
    assert header not in minibroker("acls", *base, "--list").stdout


# ---- enforcement -------------------------------------------------------------------------------

def test_produce_needs_write(secured: Secured) -> None:
    _topic(secured, "no-write")
    _add(secured, acls.topic("no-write"), acls.allow(Op.DESCRIBE))
    _visible(secured, "no-write")  # so the refusal is Produce's, not librdkafka's metadata step
    before = _denials(secured, "Produce")
    results = _produce(secured.bootstrap, "no-write")
    assert results and all(r is not None and r.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for r in results)
    assert _denials(secured, "Produce") > before
    # With Write it goes through (live: through the change notification).
    _add(secured, acls.topic("no-write"), acls.allow(Op.WRITE))
    _wait("the Write ACL", lambda: all(r is None for r in _produce(secured.bootstrap, "no-write", 1)))


def _denials(s: Secured, api: str) -> float:
    """authorization_denials_total{api} over the brokers (no series yet: 0)."""
    total = 0.0
    for b in s.brokers:
        try:
            total += metric(b, "authorization_denials_total", api=api)
        except KeyError:
            pass
    return total


def _group_acl_applied(bootstrap: str, group: str) -> bool:
    """DescribeAcls is answered from the broker's own cache, so this says what that broker enforces."""
    admin = _admin(bootstrap)
    return bool(admin.describe_acls(AclBindingFilter(ResourceType.GROUP, group, ResourcePatternType.LITERAL, None,
                                                     None, AclOperation.ANY, AclPermissionType.ANY)).result())


def _visible(s: Secured, topic: str) -> None:
    """Until every broker lists `topic` (an ACL implying Describe is in force everywhere): producing
    before that fails in librdkafka's metadata step rather than on the broker's Produce answer."""
    _wait(f"every broker to list {topic}", lambda: all(
        topic in _admin(b.bootstrap).list_topics(timeout=10).topics for b in s.brokers))


def _delivered(s: Secured, topic: str) -> bool:
    return all(r is None for r in _produce(s.bootstrap, topic, 1))


def _refused(s: Secured, topic: str) -> bool:
    return all(r is not None and r.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for r in _produce(s.bootstrap, topic))


def test_deny_beats_allow(secured: Secured) -> None:
    _topic(secured, "denied")
    _add(secured, acls.topic("denied"), acls.allow(Op.ALL))
    _visible(secured, "denied")
    _wait("the ALLOW ALL", lambda: _delivered(secured, "denied"))
    _add(secured, acls.topic("denied"), acls.deny(Op.WRITE))
    _wait("the DENY Write to win", lambda: _refused(secured, "denied"))
    # The ALLOW still holds for what the DENY does not name.
    assert "denied" in _admin(secured.bootstrap).list_topics(timeout=10).topics


def test_prefixed_acl_covers_new_topics(secured: Secured) -> None:
    _add(secured, acls.topic("pfx-", PatternType.PREFIXED), acls.allow(Op.WRITE))
    _topic(secured, "pfx-orders")
    _topic(secured, "other-orders")
    _visible(secured, "pfx-orders")
    _wait("the PREFIXED Write", lambda: _delivered(secured, "pfx-orders"))
    assert _refused(secured, "other-orders")


def test_metadata_hides_undescribable_topics(secured: Secured) -> None:
    _topic(secured, "md-visible")
    _topic(secured, "md-hidden")
    _add(secured, acls.topic("md-visible"), acls.allow(Op.READ))  # Read implies Describe
    _wait("md-visible to be listed", lambda: "md-visible" in _admin(secured.bootstrap).list_topics(timeout=10).topics)
    listed = _admin(secured.bootstrap).list_topics(timeout=10).topics
    assert "md-hidden" not in listed
    named = _admin(secured.bootstrap).list_topics("md-hidden", timeout=10).topics["md-hidden"]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consumer_group_needs_read_on_group(secured: Secured) -> None:
    _topic(secured, "grp-topic")
    _add(secured, acls.topic("grp-topic"), acls.allow(Op.READ), acls.allow(Op.WRITE))
    _visible(secured, "grp-topic")
    _wait("Write on grp-topic", lambda: _delivered(secured, "grp-topic"))
    assert all(r is None for r in _produce(secured.bootstrap, "grp-topic", 2))  # m0 (above), m0, m1
    c = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": "grp-denied", "auto.offset.reset": "earliest"})
    c.subscribe(["grp-topic"])
    error = None
    deadline = time.monotonic() + 30
    while error is None and time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is not None and msg.error() is not None:
            error = msg.error()
        assert msg is None or msg.error() is not None, "a message was consumed without Read on the group"
    c.close()
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error

    # A group with Read: its consumer reads and commits.
    _add(secured, acls.group("grp-allowed"), acls.allow(Op.READ))
    _wait("every broker to hold the group ACL", lambda: all(_group_acl_applied(b.bootstrap, "grp-allowed")
                                                            for b in secured.brokers))
    c = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": "grp-allowed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["grp-topic"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    assert sorted(got) == [b"m0", b"m0", b"m1"]
    c.commit(asynchronous=False)
    c.close()


def test_acl_added_on_one_broker_applies_on_the_other(secured: Secured) -> None:
    """CreateAcls at broker 0; broker 1 follows the change notification and answers from its cache."""
    name = f"spread-{uuid.uuid4().hex[:6]}"
    _topic(secured, name)
    second = secured.brokers[1].bootstrap
    assert name not in _admin(second).list_topics(timeout=10).topics
    binding = AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    admin = _admin(secured.bootstrap)
    next(iter(admin.create_acls([binding]).values())).result()
    # Not asserting a speed: the "within a second" is what this waits for, with slack
    # for a loaded test machine.
    _wait("broker 1 to apply the ACL", lambda: name in _admin(second).list_topics(timeout=10).topics, timeout=10)


# ---- super users, allow.everyone.if.no.acl.found, no authorizer ---------------------------------

def test_super_users_bypass(tmp_path: Path, zk_server_session: ZooKeeperServer) -> None:
    brokers, connect = _brokers(tmp_path, zk_server_session, 1,
                                {**AUTHORIZER, "super.users": "User:admin;User:ANONYMOUS"},
                                {acls.topic("*"): [acls.deny(Op.ALL)]})
    try:
        _topic(brokers[0].bootstrap, "su-topic")
        assert all(r is None for r in _produce(brokers[0].bootstrap, "su-topic"))
    finally:
        for b in brokers:
            b.stop()


def test_allow_everyone_if_no_acl_found(tmp_path: Path, zk_server_session: ZooKeeperServer) -> None:
    brokers, connect = _brokers(tmp_path, zk_server_session, 1,
                                {**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"},
                                {acls.CLUSTER: acls.BROKER_CLUSTER_ACLS})
    try:
        bootstrap = brokers[0].bootstrap
        _topic(bootstrap, "open-topic")
        assert all(r is None for r in _produce(bootstrap, "open-topic"))  # no ACL on the topic: allowed
        # Once the topic has an ACL (for someone else), ANONYMOUS no longer matches any.
        acls.seed(connect, {acls.topic("open-topic"): [acls.allow(Op.ALL, principal="User:alice")]})
        _wait("the ACL to close the topic", lambda: all(
            r is not None and r.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            for r in _produce(bootstrap, "open-topic", 1)))
    finally:
        for b in brokers:
            b.stop()


def test_without_authorizer_the_acl_apis_are_security_disabled(tmp_path: Path,
                                                                zk_server_session: ZooKeeperServer) -> None:
    brokers, _ = _brokers(tmp_path, zk_server_session, 1, {"auto.create.topics.enable": "false"})
    try:
        a = _admin(brokers[0].bootstrap)
        binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)
        with pytest.raises(KafkaException) as e:
            next(iter(a.create_acls([binding]).values())).result()
        assert e.value.args[0].code() == KafkaError.SECURITY_DISABLED
        # librdkafka's describe_acls drops DescribeAcls' top-level error (it answers an empty
        # list), so that answer is read on the wire and through the tool.
        async def describe() -> dict:
            async with await connect(brokers[0].bootstrap) as conn:
                return await conn.request(ApiKey.DESCRIBE_ACLS, 1, {
                    "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                    "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        assert asyncio.run(describe())["error_code"] == KafkaError.SECURITY_DISABLED
        out = minibroker("acls", "--bootstrap-server", brokers[0].bootstrap, "--list")
        assert out.returncode == 1 and "SECURITY_DISABLED" in out.stderr
    finally:
        for b in brokers:
            b.stop()


def test_acls_tool_needs_exactly_one_action(secured: Secured) -> None:
    out = minibroker("acls", "--bootstrap-server", secured.bootstrap, "--add", "--list", "--topic", "t")
    assert out.returncode == 1 and "exactly one action" in out.stderr


def test_idempotent_produce_needs_idempotent_write(secured: Secured) -> None:
    """Kafka 2.8: InitProducerId and a produce of idempotent batches need IdempotentWrite on the
    cluster (the seeded cluster ACLs leave it out), whatever the topic grants."""
    _topic(secured, "idem")
    _add(secured, acls.topic("idem"), acls.allow(Op.WRITE))
    _visible(secured, "idem")
    _wait("Write on idem", lambda: _delivered(secured, "idem"))
    before = _denials(secured, "InitProducerId")
    p = Producer({"bootstrap.servers": secured.bootstrap, "enable.idempotence": True, "message.timeout.ms": 10000})
    p.produce("idem", b"x")
    # librdkafka makes the refused InitProducerId a fatal error of the producer, raised by flush.
    with pytest.raises(KafkaException) as refused:
        p.flush(30)
    assert refused.value.args[0].fatal() and refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert _denials(secured, "InitProducerId") > before

    # A batch carrying a producer id (built by kafka-python, as a producer that got one would send it).
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=4242,
                                  producer_epoch=0, base_sequence=0, batch_size=1 << 20)
    b.append(0, timestamp=None, key=None, value=b"idempotent", headers=[])

    async def produce() -> int:
        async with await connect(secured.bootstrap) as conn:
            resp = await conn.request(ApiKey.PRODUCE, 8, {"acks": -1, "timeout_ms": 10000, "transactional_id": None,
                                                          "topic_data": [{"name": "idem", "partition_data": [
                                                              {"index": 0, "records": bytes(b.build())}]}]})
            return int(resp["responses"][0]["partition_responses"][0]["error_code"])
    assert asyncio.run(produce()) == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    _add(secured, acls.CLUSTER, acls.allow(Op.IDEMPOTENT_WRITE))

    def idempotent_delivered() -> bool:
        q = Producer({"bootstrap.servers": secured.bootstrap, "enable.idempotence": True,
                      "message.timeout.ms": 10000})
        out: list[KafkaError | None] = []
        q.produce("idem", b"y", on_delivery=lambda err, msg: out.append(err))
        try:
            q.flush(20)
        except KafkaException:  # still refused: the ACL has not reached that broker yet
            return False
        return out == [None]
    _wait("IdempotentWrite on the cluster", idempotent_delivered, timeout=40)


def test_offset_commit_needs_read_on_group_and_topic(secured: Secured) -> None:
    _topic(secured, "commit-t")
    _add(secured, acls.topic("commit-t"), acls.allow(Op.DESCRIBE))
    _add(secured, acls.group("commit-g"), acls.allow(Op.READ))
    _wait("every broker to hold the group ACL", lambda: all(_group_acl_applied(b.bootstrap, "commit-g")
                                                            for b in secured.brokers))

    async def commit(group: str) -> int:
        async with await connect(secured.bootstrap) as conn:
            resp = await conn.request(ApiKey.OFFSET_COMMIT, 2, {
                "group_id": group, "generation_id": -1, "member_id": "", "retention_time_ms": -1,
                "topics": [{"name": "commit-t", "partitions": [
                    {"partition_index": 0, "committed_offset": 0, "committed_metadata": None}]}]})
            return int(resp["topics"][0]["partitions"][0]["error_code"])
    assert asyncio.run(commit("commit-g")) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert asyncio.run(commit("commit-other")) == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_configs_need_describe_configs(secured: Secured) -> None:
    """CreateTopics v5 hides a new topic's configs without DescribeConfigs; DescribeConfigs is
    refused per resource (TOPIC_AUTHORIZATION_FAILED) until an ACL grants it (AlterConfigs implies it)."""
    async def create() -> dict:
        async with await connect(secured.bootstrap) as conn:
            resp = await conn.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
                {"name": "cfg-t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout_ms": 30000, "validate_only": False})
            return resp["topics"][0]
    created = asyncio.run(create())
    assert created["error_code"] == 0
    assert created["topic_config_error_code"] == KafkaError.TOPIC_AUTHORIZATION_FAILED and not created["configs"]

    from confluent_kafka.admin import ConfigResource
    admin = _admin(secured.bootstrap)
    with pytest.raises(KafkaException) as e:
        next(iter(admin.describe_configs([ConfigResource("topic", "cfg-t")]).values())).result()
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    _add(secured, acls.topic("cfg-t"), acls.allow(Op.ALTER_CONFIGS))

    def described() -> bool:
        try:
            entries = next(iter(admin.describe_configs([ConfigResource("topic", "cfg-t")]).values())).result()
        except KafkaException:
            return False
        return "retention.ms" in entries
    _wait("DescribeConfigs implied by AlterConfigs", described)


def test_replication_runs_on_the_cluster_action_acl(secured: Secured) -> None:
    """Followers fetch (and the controller sends its requests) as User:ANONYMOUS: with ClusterAction
    on the cluster granted by the seeded ACL, an acks=all produce to two replicas completes."""
    admin = _admin(secured.bootstrap)
    admin.create_topics([NewTopic("rf2", 1, 2)], operation_timeout=30)["rf2"].result()
    _add(secured, acls.topic("rf2"), acls.allow(Op.WRITE))
    _visible(secured, "rf2")  # Write implies Describe
    p = Producer({"bootstrap.servers": secured.bootstrap, "acks": "all", "message.timeout.ms": 30000})
    out: list[KafkaError | None] = []
    p.produce("rf2", b"replicated", on_delivery=lambda err, msg: out.append(err))
    assert p.flush(40) == 0
    assert out == [None]
    md = admin.list_topics("rf2", timeout=10).topics["rf2"].partitions[0]
    assert sorted(md.isrs) == [0, 1]
