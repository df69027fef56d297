"""KIP-599 controller mutation quotas on a real three-broker cluster, with real admin clients.

A rate R gives a bucket of 11 x 1 s x R partitions (controller.quota.window.num x
controller.quota.window.size.seconds x R), full at first. Strict mode (CreateTopics v6+,
CreatePartitions v3+, DeleteTopics v5+) admits a topic while the tokens are not below zero
and takes its whole partition count; a topic that finds them below zero is refused with
THROTTLING_QUOTA_EXCEEDED (89) and the response carries throttle_time_ms = -tokens / R.
Older versions are permissive: every topic goes through, the response carries the throttle
owed after recording, and the broker reads nothing more from the connection for that long.

What the real clients send here (read from their own logs in the tests below, which assert it):

- kafka-python 3.0.12 (`KafkaAdminClient`): CreateTopics v7 and DeleteTopics v6 (its own
  ranges 2-7 and 1-6 within this broker's 0-7 and 0-6, Kafka 2.8's), so it meets strict mode. It sends
  them to the controller named in its Metadata response, and gives up nothing on error code 89:
  the caller retries the refused topics.
- confluent-kafka 2.16.1 / librdkafka 2.16.0 (`AdminClient`): CreateTopics v4 and DeleteTopics v4,
  also to the controller: permissive mode, never error 89, only paced.
- `minibroker topics`: CreateTopics v6, CreatePartitions v3, DeleteTopics v5, to the first
  reachable server of --bootstrap-server (client id "minibroker-tool").

Buckets are per broker: each broker counts the requests it handles. The tests send admin
requests to the controller, as Kafka's clients do, and read the controller's metrics.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from types import TracebackType
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from tests.support import tools
from tests.support.brokers import BrokerProcess
from tests.support.cluster import Cluster
from tests.support.metrics import metric
from tests.support.wire import connect

pytestmark = pytest.mark.integration

THROTTLED = 89
WINDOWS = 11  # controller.quota.window.num x controller.quota.window.size.seconds (1)


def set_rate(cluster: Cluster, client: str | None, rate: float) -> None:
    """`minibroker configs --alter`: a client id's controller_mutation_rate (None: the default entity)."""
    entity = ["--entity-default"] if client is None else ["--entity-name", client]
    r = tools.configs(cluster.brokers[0].zk_connect, "--entity-type", "clients", *entity, "--alter",
                "--add-config", f"controller_mutation_rate={rate}")
    assert r.returncode == 0, r.stderr


def tokens(broker: BrokerProcess, client: str) -> float | None:
    """The client's bucket on this broker (None while it has none: unknown client or no quota)."""
    try:
        return metric(broker, "controller_mutation_tokens", client_id=client)
    except KeyError:
        return None


def topic_spec(name: str, partitions: int = 4, rf: int = 1) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": rf, "assignments": [], "configs": []}


def create_body(names: list[str], partitions: int = 4, validate_only: bool = False, timeout_ms: int = 30000) -> dict:
    return {"topics": [topic_spec(n, partitions) for n in names], "timeout_ms": timeout_ms,
            "validate_only": validate_only}


def codes_of(resp: dict, key: str = "topics") -> list[int]:
    return [t["error_code"] for t in resp[key]]


async def limit(cluster: Cluster, broker: BrokerProcess, clients: list[str], rate: float,
                default: bool = False) -> None:
    """Put `clients` under `rate` on `broker` and wait until their buckets are there, full.

    Each client first creates one 1-partition topic while unlimited, so the broker knows it
    without a bucket; the bucket appears (full: 11 x rate) exactly when the new quota reaches
    the broker, which the tokens metric shows. `default` sets it on --entity-default.
    """
    for client in clients:
        async with await connect(broker, client) as conn:
            resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body([f"hello-{client}"], 1), 30)
        assert codes_of(resp) == [0] and resp["throttle_time_ms"] == 0, resp
        assert tokens(broker, client) is None
    for client in [None] if default else clients:
        set_rate(cluster, client, rate)
    deadline = time.monotonic() + 15
    while [tokens(broker, c) for c in clients] != [WINDOWS * rate] * len(clients):
        assert time.monotonic() < deadline, f"controller_mutation_rate={rate} never applied to {clients}"
        await asyncio.sleep(0.05)


async def zk_partition_counts(cluster: Cluster, names: list[str]) -> dict[str, int]:
    """Partition count of each named topic that exists in ZooKeeper (its assignment znode)."""
    existing = set(await cluster.zk.get_children("/brokers/topics"))
    out = {}
    for n in names:
        if n in existing:
            data, _ = await cluster.zk.get(f"/brokers/topics/{n}")
            out[n] = len(json.loads(data)["partitions"])
    return out


class ClientLog(logging.Handler):
    """Collects a real client's own log lines (kafka-python's debug log, librdkafka's debug=protocol)."""

    def __init__(self, logger: str) -> None:
        super().__init__(logging.DEBUG)
        self.logger = logging.getLogger(logger)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> ClientLog:
        self._level = self.logger.level
        self.logger.addHandler(self)
        self.logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self._level)

    def find(self, pattern: str) -> list[tuple[str, ...]]:
        rx = re.compile(pattern)
        return [m.groups() for line in list(self.lines) if (m := rx.search(line))]

    # kafka-python: "node=0[127.0.0.1:4711] Sending request 2 CreateTopicsRequest(version=6, ..."
    def kp_sent(self, api: str) -> list[tuple[int, int]]:
        return [(int(n), int(v)) for n, v in self.find(rf"node=(\d+)\[\S+\] Sending request \d+ {api}Request\(version=(\d+)")]

    def kp_throttles(self, api: str) -> list[int]:
        return [int(t) for (t,) in self.find(rf"Received response \d+ {api}Response\(version=\d+, throttle_time_ms=(\d+)")]

    # librdkafka: "127.0.0.1:4711/0: Sent CreateTopicsRequest (v4, 1155 bytes @ 0, CorrId 3)"
    def rd_sent(self, api: str) -> list[tuple[int, int]]:
        return [(int(n), int(v)) for n, v in self.find(rf"/(\d+): Sent {api}Request \(v(\d+),")]


# ---- 1. strict burst from kafka-python ------------------------------------------------------

def _create_unpaused(admin: Any, topics: dict[str, dict[str, int]]) -> Any:  # noqa: ANN401 - kafka-python's types
    """kafka-python's create_topics, sent again when the client refuses it as paused.

    Seeing Kafka 2.8's table, kafka-python 3 throttles on its side too (KIP-219: brokers from 2.0):
    a response with throttle_time_ms pauses the connection until a timer in its network loop
    lifts the pause, and that loop runs only while a call is in flight. So the first call after
    an idle wait finds the connection still paused and raises NodeNotReadyError at once (the
    broker never saw it; running the loop lifts the pause); a user's retry sends it."""
    from kafka.errors import NodeNotReadyError

    for _ in range(3):
        try:
            return admin.create_topics(topics, raise_errors=False)
        except NodeNotReadyError:
            time.sleep(0.05)
    return admin.create_topics(topics, raise_errors=False)


async def test_kafka_python_burst_is_split_per_topic_by_the_bucket_and_its_retries_get_in(cluster: Cluster) -> None:
    from kafka.admin import KafkaAdminClient

    controller = cluster.by_id(await cluster.controller())
    await limit(cluster, controller, ["kp-admin", "own-admin"], 5)  # bucket 55 each
    # kafka-python's burst is 30 topics (our own client's, below, 60): past the bucket's 14 all the
    # same, and the 16 refused are 64 partitions to retry at 5/s, ~13 s (60 topics' 184 took ~37 s).
    names = [f"kp-{i:02d}" for i in range(30)]

    def check_burst(codes: list[int], throttle: int, took: float) -> int:
        assert set(codes) <= {0, THROTTLED}, codes
        admitted = codes.count(0)
        # 13 x 4 = 52 <= 55, 14 x 4 = 56 > 55: the first 14 are admitted and the 15th finds -1 tokens,
        # so it and every topic after it are refused. The bucket refills at 5/s while the broker works
        # through the request, though: a later topic is admitted again once the refill has brought the
        # tokens back to zero, i.e. the n-th admission needs 4n - 59 tokens of refill (one token,
        # 200 ms, for a 15th). Allow exactly what the request's duration can explain: on a quiet
        # machine that is 14 admitted and the rest refused, on a loaded one the boundary moves by one (or a later topic
        # gets in).
        assert codes[:14] == [0] * 14, codes
        assert 4 * admitted - 59 <= 5 * took, (admitted, took, codes)
        # As in Kafka (ControllerMutationQuota.throttleTime), throttle_time_ms is what the *last
        # refusal* owed, -tokens / 5 s then, less the time from that refusal to the response (the
        # other refusals, waiting for the new leaders). At that refusal the tokens were
        # 55 - 4 x (topics admitted before it) plus the refill since the start, hence the bounds.
        # A topic the refill let in after the last refusal adds to the bucket's debt, not to the
        # response's throttle (check_owed holds the two together).
        last_refused = len(codes) - 1 - codes[::-1].index(THROTTLED)
        expected = (4 * codes[:last_refused].count(0) - 5 * WINDOWS) / 5 * 1000
        assert expected - 1000 * took <= throttle <= expected, (throttle, expected, took, codes)
        return admitted

    def check_owed(codes: list[int], throttle: int, left: float | None, lag_s: float) -> None:
        """The response's throttle against what the bucket still owes when it goes out (-tokens / 5):
        equal, less 800 ms for each topic admitted after the last refusal (each took 4 tokens the
        response's throttle does not include). The tokens are read from the metrics a little
        later, the bucket refilling meanwhile: what it owes then is less by up to `lag_s` (from
        the response's arrival to the scrape's end, plus the 50 ms allowed for its delivery)."""
        assert left is not None, "no bucket"
        owed = max(0.0, -left / 5 * 1000 - not_in_throttle_ms(codes))
        assert owed - 50 <= throttle <= owed + 1000 * lag_s + 50, (throttle, left, lag_s, codes)

    def not_in_throttle_ms(codes: list[int]) -> int:
        """What a response's throttle leaves out of the debt: 4 tokens (800 ms) per topic admitted after its last refusal."""
        if THROTTLED not in codes:
            return 0
        return 800 * codes[len(codes) - 1 - codes[::-1].index(THROTTLED):].count(0)

    # Our own client first, CreateTopics v6 with timeout_ms 0 (answered without waiting for the
    # new leaders): the refused 46 get the ~200 ms less only the time the broker takes to refuse
    # them (each is validated against ZooKeeper first, as in Kafka; some 100-150 ms here).
    async with await connect(controller, "own-admin") as conn:
        t0 = time.monotonic()
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6,
                                  create_body([f"own-{i:02d}" for i in range(60)], timeout_ms=0), 60)
        answered = time.monotonic()
        took = answered - t0
        left = tokens(controller, "own-admin")
        lag = time.monotonic() - answered
    own_admitted = check_burst(codes_of(resp), resp["throttle_time_ms"], took)
    own_throttle = resp["throttle_time_ms"]
    # ... which is what the bucket still owes when the response goes out: -tokens / 5.
    check_owed(codes_of(resp), own_throttle, left, lag)
    assert all(t["error_message"] for t in resp["topics"] if t["error_code"] == THROTTLED)

    spec = {"num_partitions": 4, "replication_factor": 1}
    with ClientLog("kafka") as log:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="kp-admin", request_timeout_ms=60000)
        try:
            t0 = time.monotonic()
            resp = await asyncio.to_thread(admin.create_topics, {n: spec for n in names}, raise_errors=False)
            answered = time.monotonic()
            took = answered - t0
            left = tokens(controller, "kp-admin")
            lag = time.monotonic() - answered
            # One CreateTopics v7 request (strict from v6), sent to the controller.
            assert log.kp_sent("CreateTopics") == [(controller.broker_id, 7)]
            assert [t["name"] for t in resp["topics"]] == names
            [throttle] = log.kp_throttles("CreateTopics")
            admitted = check_burst(codes_of(resp), throttle, took)
            check_owed(codes_of(resp), throttle, left, lag)
            first_throttle = throttle
            assert all(t["error_message"] for t in resp["topics"] if t["error_code"] == THROTTLED)
            assert await zk_partition_counts(cluster, names) == {t["name"]: 4 for t in resp["topics"]
                                                                 if t["error_code"] == 0}
            # Only the controller handled it: the other brokers never heard of this client id.
            assert metric(controller, "controller_mutation_rate", client_id="kp-admin") > 0
            for b in cluster.brokers:
                if b is not controller:
                    with pytest.raises(KeyError):
                        metric(b, "controller_mutation_rate", client_id="kp-admin")

            # The client retries what was refused, each time after the throttle it was given (and
            # the 800 ms of any topic admitted after the last refusal, which it does not include).
            # Having waited it out the tokens are back at >= 0, so every round admits at least one
            # topic (then about one per 800 ms): 64 partitions at 5/s, about 13 s in all.
            pending = [t["name"] for t in resp["topics"] if t["error_code"] == THROTTLED]
            rounds = 0
            while pending:
                assert rounds < len(names) - 14, f"{len(pending)} topics still refused after {rounds} rounds"
                await asyncio.sleep((throttle + not_in_throttle_ms(codes_of(resp))) / 1000)
                resp = await asyncio.to_thread(_create_unpaused, admin, {n: spec for n in pending})
                rounds += 1
                assert [t["name"] for t in resp["topics"]] == pending
                codes = codes_of(resp)
                assert set(codes) <= {0, THROTTLED}, codes
                assert codes[0] == 0, f"round {rounds}: refused although the throttle ({throttle} ms) was waited out"
                k = codes.count(0)
                pending = [t["name"] for t in resp["topics"] if t["error_code"] == THROTTLED]
                throttle = log.kp_throttles("CreateTopics")[-1]
                if pending:  # started at >= 0 tokens, took 4 per admitted topic, went below zero
                    assert 0 <= throttle <= 800 * k, (throttle, k)
            assert set(log.kp_sent("CreateTopics")) == {(controller.broker_id, 7)}
        finally:
            await asyncio.to_thread(admin.close)
    print(f"topics x 4 partitions at 5/s: our client (v6, timeout_ms 0, 60 topics) {own_admitted} admitted, throttle "
          f"{own_throttle} ms; kafka-python (v7, {len(names)} topics) {admitted} admitted, answered after {took:.2f} s with throttle "
          f"{first_throttle} ms, the rest in "
          f"{rounds} retry rounds, {time.monotonic() - t0:.1f} s in all")
    assert await zk_partition_counts(cluster, names) == {n: 4 for n in names}
    assert metric(controller, "controller_mutation_throttle_time_ms", client_id="kp-admin") > 0


# ---- 2. permissive burst from confluent-kafka (librdkafka) ----------------------------------

async def test_confluent_admin_sends_v4_so_the_burst_is_paced_not_refused(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    controller = cluster.by_id(await cluster.controller())
    # At 16/s the bucket is 176 and 60 topics x 5 partitions owe (300 - 176) / 16 = 7.75 s, less the
    # refill while the broker records them. operation_timeout=0 (CreateTopics timeout_ms 0): the
    # broker answers once the topics are recorded, without waiting for their leaders, which on a
    # loaded machine took long enough (19 s in CI) for the refill to pay the whole debt before the
    # answer, leaving no throttle to see.
    rate = 16
    partitions = 5
    await limit(cluster, controller, ["cf-admin"], rate)
    throttles: list[tuple[int, float]] = []
    with ClientLog("test.librdkafka") as log:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "client.id": "cf-admin", "debug": "protocol",
                             "throttle_cb": lambda e: throttles.append((e.broker_id, e.throttle_time))},
                            logger=log.logger)

        async def create(topics: list[NewTopic]) -> None:
            for f in admin.create_topics(topics, operation_timeout=0).values():
                await asyncio.to_thread(f.result, 60)  # raises on any error code

        names = [f"cf-{i:02d}" for i in range(60)]
        t0 = time.monotonic()
        await create([NewTopic(n, partitions, 1) for n in names])  # every topic created, no error
        t1 = time.monotonic()
        left = tokens(controller, "cf-admin")
        # Right after: answered only once the throttle of the first is over (the broker did not
        # read the connection meanwhile).
        await create([NewTopic("cf-after", 1, 1)])
        t2 = time.monotonic()
        for _ in range(25):
            admin.poll(0.02)  # serves the log lines and throttle events
        assert log.rd_sent("CreateTopics") == [(controller.broker_id, 4)] * 2
        assert throttles and throttles[0][0] == controller.broker_id, throttles
        throttle = throttles[0][1]
        owed = (partitions * 60 - WINDOWS * rate) / rate
        assert owed - (t1 - t0) <= throttle <= owed, (throttle, t1 - t0)
        # At least what the bucket still owes when read just after the answer (-tokens / rate; by
        # then the refill can only have lowered it): the broker's own count, not a wall-time guess.
        assert left is not None and left < 0 and -left / rate <= throttle + 0.05, (throttle, left)
        assert throttle - 0.1 <= t2 - t1 <= throttle + 2.0, (t2 - t1, throttle)
        assert await zk_partition_counts(cluster, [*names, "cf-after"]) == \
            {n: partitions for n in names} | {"cf-after": 1}

        # DeleteTopics v4 is permissive too: 295 partitions, more than the whole bucket (176) could
        # ever hold, all deleted without an error; only the throttle grows.
        throttles.clear()
        for f in admin.delete_topics(names[1:], operation_timeout=0).values():
            await asyncio.to_thread(f.result, 60)
        left = tokens(controller, "cf-admin")
        assert left is not None and left <= WINDOWS * rate - partitions * 59
        for _ in range(25):
            admin.poll(0.02)
        assert log.rd_sent("DeleteTopics") == [(controller.broker_id, 4)]
        # throttle_time_ms = -tokens / rate: what the bucket shows just after.
        assert throttles and throttles[-1][1] == pytest.approx(-left / rate, abs=0.2), (throttles, left)
    print(f"librdkafka: 60 topics x {partitions} partitions at {rate}/s all created in {t1 - t0:.2f} s, throttle "
          f"{throttle:.3f} s, next CreateTopics answered after {t2 - t1:.2f} s")


# ---- 3. old versions: paced, never refused --------------------------------------------------

async def test_old_versions_are_throttled_without_errors(cluster: Cluster) -> None:
    controller = cluster.by_id(await cluster.controller())
    await limit(cluster, controller, ["old-client"], 5)  # bucket 55
    names = [f"old-{i:02d}" for i in range(16)]
    more = ["old-b-0", "old-b-1"]
    a = await connect(controller, "old-client")
    b = await connect(controller, "old-client")
    try:
        # CreateTopics v2: 64 partitions against 55 tokens, all created, 9 / 5 = 1.8 s owed (less
        # the refill while they are recorded). timeout_ms 0: answered without waiting for leaders.
        t0 = time.monotonic()
        resp = await a.request(ApiKey.CREATE_TOPICS, 2, create_body(names, timeout_ms=0), 60)
        t1 = time.monotonic()
        assert codes_of(resp) == [0] * 16, resp
        throttle_a = resp["throttle_time_ms"]
        assert 1800 - 1000 * (t1 - t0) <= throttle_a <= 1800, (throttle_a, t1 - t0)

        # On a second connection while the bucket is below zero (strict mode would refuse):
        # created, and the throttle grows by 8 / 5 s.
        resp = await b.request(ApiKey.CREATE_TOPICS, 2, create_body(more, timeout_ms=0), 60)
        t2 = time.monotonic()
        assert codes_of(resp) == [0, 0], resp
        throttle_b = resp["throttle_time_ms"]
        assert throttle_a + 1600 - 1000 * (t2 - t0) <= throttle_b <= throttle_a + 1600, (throttle_b, throttle_a)
        assert t2 - t1 < throttle_a / 1000  # the other connection is not paused by the first one's throttle

        # The next request on each connection is read only when that connection's throttle is over.
        next_b = asyncio.create_task(b.request(ApiKey.CREATE_PARTITIONS, 1, {
            "topics": [{"name": more[0], "count": 5, "assignments": None}], "timeout_ms": 0, "validate_only": False}, 60))
        resp = await a.request(ApiKey.DELETE_TOPICS, 1, {"topic_names": names[:2], "timeout_ms": 0}, 60)
        t3 = time.monotonic()
        assert codes_of(resp, "responses") == [0, 0] and resp["throttle_time_ms"] > 0, resp
        assert throttle_a / 1000 - 0.05 <= t3 - t1 <= throttle_a / 1000 + 1.5, (t3 - t1, throttle_a)
        resp = await next_b
        t4 = time.monotonic()
        assert codes_of(resp, "results") == [0] and resp["throttle_time_ms"] > 0, resp
        assert throttle_b / 1000 - 0.05 <= t4 - t2 <= throttle_b / 1000 + 1.5, (t4 - t2, throttle_b)
    finally:
        await a.close()
        await b.close()
    print(f"old versions: CreateTopics v2 throttle {throttle_a} ms, next request answered after {t3 - t1:.2f} s; "
          f"second connection {throttle_b} ms, answered after {t4 - t2:.2f} s")
    assert await zk_partition_counts(cluster, names[2:] + more) == {n: 4 for n in names[2:]} | {more[0]: 5, more[1]: 4}


# ---- 4. ValidateOnly is free ------------------------------------------------------------------

async def test_validate_only_is_never_counted_nor_refused(cluster: Cluster) -> None:
    controller = cluster.by_id(await cluster.controller())
    await limit(cluster, controller, ["vo-client"], 2)  # bucket 22
    async with await connect(controller, "vo-client") as conn:
        # Strict mode admits a topic while the tokens are not below zero, and throttles nothing
        # (as Kafka): 22 - 60 = -38, 19 s to pay back, owed by the next request.
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body(["vo-big"], 60, timeout_ms=0), 60)
        assert codes_of(resp) == [0] and resp["throttle_time_ms"] == 0
    before = tokens(controller, "vo-client")
    t0 = time.monotonic()
    assert before is not None and before < -30
    names = [f"vo-{i:02d}" for i in range(50)]
    async with await connect(controller, "vo-client") as conn:
        for version in (6, 6, 6, 5, 2, 1, 6, 2, 6, 6):  # strict and permissive versions alike
            t = time.monotonic()
            resp = await conn.request(ApiKey.CREATE_TOPICS, version, create_body(names, 100, validate_only=True), 60)
            assert codes_of(resp) == [0] * 50, resp  # 5000 partitions a request, never 89
            assert resp.get("throttle_time_ms", 0) == 0 and time.monotonic() - t < 2
        elapsed = time.monotonic() - t0
        after = tokens(controller, "vo-client")
        # Only the refill (2/s) moved the bucket: nothing was recorded.
        assert after is not None and before <= after <= before + 2 * elapsed + 0.2, (before, after, elapsed)
        # The bucket really was exhausted all along: a real create is still refused.
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body(["vo-real"], 1), 60)
        assert codes_of(resp) == [THROTTLED]
    assert await zk_partition_counts(cluster, [*names, "vo-real"]) == {}


# ---- 5. each client id its own bucket -------------------------------------------------------

async def test_another_client_id_has_its_own_bucket(cluster: Cluster) -> None:
    from kafka.admin import KafkaAdminClient

    controller = cluster.by_id(await cluster.controller())
    # The default quota: every client id without its own gets a bucket of its own at that rate.
    await limit(cluster, controller, ["iso-a", "iso-b"], 2, default=True)  # bucket 22 each
    async with await connect(controller, "iso-a") as conn:
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body(["iso-a-big"], 40, timeout_ms=0), 60)
        assert codes_of(resp) == [0] and resp["throttle_time_ms"] == 0  # strict: 22 - 40 = -18, nothing refused
    async with await connect(controller, "iso-a") as conn:
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body(["iso-a-1"], 1), 60)
        assert codes_of(resp) == [THROTTLED] and resp["throttle_time_ms"] > 0

    # Meanwhile iso-b, through kafka-python (CreateTopics v7, DeleteTopics v6: strict), is not held.
    names = [f"iso-b-{i}" for i in range(5)]
    with ClientLog("kafka") as log:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="iso-b")
        try:
            t0 = time.monotonic()
            created = await asyncio.to_thread(admin.create_topics, {n: {"num_partitions": 2, "replication_factor": 1}
                                                                    for n in names}, raise_errors=False)
            deleted = await asyncio.to_thread(admin.delete_topics, names, raise_errors=False)
            elapsed = time.monotonic() - t0
        finally:
            await asyncio.to_thread(admin.close)
    assert codes_of(created) == [0] * 5 and codes_of(deleted) == [0] * 5
    assert log.kp_sent("CreateTopics") == [(controller.broker_id, 7)]  # Kafka 2.8's newest: strict
    assert log.kp_sent("DeleteTopics") == [(controller.broker_id, 6)]
    assert log.kp_throttles("CreateTopics") == [0] and log.kp_throttles("DeleteTopics") == [0]
    # iso-b spent 10 + 10 of its own 22; iso-a is still below zero, and still refused.
    b_tokens = tokens(controller, "iso-b")
    assert b_tokens is not None and 2 <= b_tokens <= 2 + 2 * elapsed + 0.5, (b_tokens, elapsed)
    a_tokens = tokens(controller, "iso-a")
    assert a_tokens is not None and a_tokens < 0
    async with await connect(controller, "iso-a") as conn:
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body(["iso-a-2"], 1), 60)
        assert codes_of(resp) == [THROTTLED]


# ---- 6. minibroker topics ---------------------------------------------------------------------

async def test_topics_tool_reports_the_violation_and_retries_on_request(cluster: Cluster) -> None:
    broker = cluster.brokers[0]  # the tool talks to the first server it can reach

    topics = functools.partial(tools.topics, broker.bootstrap)

    await limit(cluster, broker, ["minibroker-tool"], 2)  # bucket 22
    # Exhaust the tool's bucket (same client id): admitted, 22 - 30 = -8, 4 s owed.
    t0 = time.monotonic()
    async with await connect(broker, "minibroker-tool") as conn:
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body(["big"], 30, timeout_ms=0), 60)
    assert codes_of(resp) == [0] and resp["throttle_time_ms"] == 0
    r = await asyncio.to_thread(topics, "--create", "--topic", "next", "--partitions", "1", "--replication-factor", "1")
    assert r.returncode == 1, (r.stdout, r.stderr)
    m = re.search(r"Error for topic next: THROTTLING_QUOTA_EXCEEDED .*throttle_time_ms=(\d+)", r.stderr)
    assert m, r.stderr
    assert 0 < int(m.group(1)) <= 4000
    assert "Created topic" not in r.stdout
    assert await zk_partition_counts(cluster, ["big", "next"]) == {"big": 30}

    r = await asyncio.to_thread(topics, "--create", "--topic", "next", "--partitions", "1", "--replication-factor", "1",
                                "--retry-on-quota-violation")
    assert r.returncode == 0, r.stderr
    assert "Created topic next." in r.stdout
    assert "retrying in" in r.stderr  # it was refused at least once before getting in
    assert time.monotonic() - t0 < 4 + 10
    assert await zk_partition_counts(cluster, ["big", "next"]) == {"big": 30, "next": 1}


# ---- 7. bad input: Kafka's codes, never counted -----------------------------------------------

async def test_invalid_topics_get_their_codes_and_cost_nothing(cluster: Cluster) -> None:
    controller = cluster.by_id(await cluster.controller())
    await limit(cluster, controller, ["bad-input"], 1)  # bucket 11
    # The valid topics, last in the request, take exactly the 11 tokens: had any invalid one
    # before them been counted, the last valid topic would have found the bucket below zero.
    topics = [
        topic_spec("bad name!", 1),
        topic_spec("x" * 250, 1),
        topic_spec("zero", 0),
        topic_spec("negative", -5),  # -1 would mean the broker default
        topic_spec("too-many-replicas", 1, rf=4),
        topic_spec("twice", 1),
        topic_spec("twice", 1),
        topic_spec("y" * 249, 1),  # the longest legal name
        topic_spec("fine-a", 6),
        topic_spec("fine-b", 4),
    ]
    async with await connect(controller, "bad-input") as conn:
        t0 = time.monotonic()
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6,
                                  {"topics": topics, "timeout_ms": 30000, "validate_only": False}, 60)
        elapsed = time.monotonic() - t0
    assert [t["name"] for t in resp["topics"]] == [t["name"] for t in topics]
    assert codes_of(resp) == [17, 17, 37, 37, 38, 42, 42, 0, 0, 0], resp
    assert all(t["error_message"] for t in resp["topics"][:7])
    assert resp["throttle_time_ms"] == 0
    # 11 - (1 + 6 + 4) = 0, plus the refill since (1/s).
    left = tokens(controller, "bad-input")
    assert left is not None and 0 <= left <= elapsed + 1, (left, elapsed)
    names = [t["name"] for t in topics]
    assert await zk_partition_counts(cluster, names) == {"y" * 249: 1, "fine-a": 6, "fine-b": 4}


# ---- 8. elections are not held up by a mutation storm -----------------------------------------

async def test_controller_elects_leaders_promptly_during_a_mutation_storm(cluster: Cluster) -> None:
    controller = cluster.by_id(await cluster.controller())
    victim, survivor = [b for b in cluster.brokers if b is not controller]
    await limit(cluster, controller, ["storm"], 5)
    # Six partitions the victim leads (preferred replica first), followed by the survivor.
    async with await connect(controller, "setup") as conn:
        resp = await conn.request(ApiKey.CREATE_TOPICS, 1, {"topics": [{
            "name": "led", "num_partitions": -1, "replication_factor": -1, "configs": [],
            "assignments": [{"partition_index": p, "broker_ids": [victim.broker_id, survivor.broker_id]}
                            for p in range(6)]}], "timeout_ms": 30000}, 60)
    assert codes_of(resp) == [0], resp
    for p in range(6):
        await cluster.wait_isr("led", p, {victim.broker_id, survivor.broker_id})
        assert (await cluster.state("led", p))["leader"] == victim.broker_id

    stop = asyncio.Event()
    done = {"created": 0, "refused": 0, "deleted": 0, "answers_after_kill": 0}
    killed_at: list[float] = []

    async def storm() -> None:
        async with await connect(controller, "storm") as conn:
            i = 0
            while not stop.is_set():
                names = [f"storm-{i}-{j}" for j in range(5)]
                i += 1
                resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body(names, 2, timeout_ms=0), 60)
                done["created"] += codes_of(resp).count(0)
                done["refused"] += codes_of(resp).count(THROTTLED)
                resp = await conn.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": names, "timeout_ms": 0}, 60)
                done["deleted"] += codes_of(resp, "responses").count(0)
                if killed_at:
                    done["answers_after_kill"] += 2

    task = asyncio.create_task(storm())
    try:
        await asyncio.sleep(3)
        assert not task.done()
        victim.kill()  # SIGKILL
        killed_at.append(time.monotonic())

        async def moved() -> bool:
            for p in range(6):
                if (await cluster.state("led", p))["leader"] != survivor.broker_id:
                    return False
            return True

        await cluster.wait_for("new leaders for the killed broker's partitions", moved, timeout=30, interval=0.05)
        elapsed = time.monotonic() - killed_at[0]
        await asyncio.sleep(1)  # the storm goes on against the controller
    finally:
        stop.set()
        await task
    print(f"leader election after kill -9 during a mutation storm: {elapsed:.2f} s "
          f"(storm: {done['created']} topics created, {done['refused']} refused with 89, {done['deleted']} deleted, "
          f"{done['answers_after_kill']} answers after the kill)")
    assert done["refused"] > 0 and done["created"] > 0  # the storm really was held by its quota
    assert done["answers_after_kill"] > 0
    assert elapsed <= 6.0 + 2.0  # zookeeper.session.timeout.ms (FAST: 6000) + 2 s
