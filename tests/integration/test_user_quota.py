"""KIP-55 quotas per user on a real broker, with confluent-kafka, set through ZooKeeper with `minibroker configs`.

Kafka's table, highest first: /config/users/<user>/clients/<client-id>, .../clients/<default>,
/config/users/<user>, the same three under users/<default>, /config/clients/<client-id>,
/config/clients/<default>. A request is metered under the entity that matched: under a user
quota all that user's client ids share one bucket; a user+client quota gives that client one of
its own. Rates are scaled to this shared 2-core machine, measured from what the broker really
took in (log growth) over spans after the pacing bucket's first second, with the tolerance of
test_client_quota.py.

Each test runs twice, as the `quota_user` fixture's two users: ANONYMOUS (a PLAINTEXT
listener: Kafka meters unauthenticated clients under that user name) and `alice` logged in
with SASL PLAIN on a SASL_PLAINTEXT listener (User:alice). The fixture is the one place that
names the user, how the clients authenticate as it, and the broker's listener for it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from fetcher.connection import KafkaConnection
from fetcher.security import ClientSecurity
from protocol.api_keys import ApiKey
from tests.support.brokers import BrokerProcess
from tests.support.metrics import metric, samples, scrape
from tests.support.ports import free_port
from tests.support.replication import log_bytes
from tests.support.sasl import confluent_config, plain_jaas
from tests.support.sasl import security as sasl_security
from tests.support.tools import configs
from tests.support.topics import create_topic
from tests.support.traffic import consume_for, produce_bytes, produce_one

pytestmark = pytest.mark.integration

KB = 1000
THROTTLED = 89  # THROTTLING_QUOTA_EXCEEDED


@dataclass
class QuotaUser:
    """Who the test's clients are: the user's name and the client settings that make them that user
    (confluent-kafka's `client_conf`, the project's own connection's `security`), and the broker
    properties of the listener they use (none: the PLAINTEXT listener)."""

    name: str
    client_conf: dict[str, str] = field(default_factory=dict)
    security: ClientSecurity = field(default_factory=ClientSecurity)
    broker_props: dict[str, str] = field(default_factory=dict)
    port: int | None = None  # the listener's; None: the broker's PLAINTEXT port

    def bootstrap(self, b: BrokerProcess) -> str:
        return f"127.0.0.1:{self.port or b.port}"

    async def connect(self, b: BrokerProcess, client_id: str) -> KafkaConnection:
        return await KafkaConnection.open("127.0.0.1", self.port or b.port, client_id=client_id,
                                          security=self.security)


def _sasl_alice() -> QuotaUser:
    port = free_port()
    return QuotaUser("alice", {k: v for k, v in confluent_config(port, "PLAIN", "alice").items()
                               if k != "bootstrap.servers"},
                     sasl_security("PLAIN", "alice"),
                     {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
                      "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
                      "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas()}, port)


@pytest.fixture(params=["ANONYMOUS", "sasl-alice"])
def quota_user(request: pytest.FixtureRequest) -> QuotaUser:
    return QuotaUser("ANONYMOUS") if request.param == "ANONYMOUS" else _sasl_alice()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess], quota_user: QuotaUser) -> BrokerProcess:
    b = broker_factory(0, start=False, metrics=True, num_partitions="1")
    if quota_user.port is not None:  # its own listener beside the PLAINTEXT one the test helpers use
        props = {**quota_user.broker_props,
                 "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{quota_user.port}"}
        b.props.write_text(b.props.read_text() + "".join(f"{k}={v}\n" for k, v in props.items()))
    b.start()
    return b


def alter(zk: str, *entity: str, config: str) -> None:
    r = configs(zk, *entity, "--alter", "--add-config", config)
    assert r.returncode == 0, r.stderr


def user_entity(user: QuotaUser, client: str | None = None) -> list[str]:
    entity = ["--entity-type", "users", "--entity-name", user.name]
    return entity + ([] if client is None else ["--entity-type", "clients", "--entity-name", client])


class ThrottledProducer:
    """confluent-kafka offering `rate` B/s of 1 KB messages to one topic until stopped; keeps the
    throttle times the broker returned (librdkafka's throttle_cb: responses' throttle_time_ms)."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, rate: float, conf: dict[str, str]) -> None:
        self.throttles: list[int] = []
        self.stop = threading.Event()
        self.args = (bootstrap, client_id, topic, rate, conf)

    def run(self) -> None:
        bootstrap, client_id, topic, rate, conf = self.args
        p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": "1", "linger.ms": 5,
                      "batch.size": 16384, "enable.idempotence": False, **conf,
                      "throttle_cb": lambda e: self.throttles.append(int(e.throttle_time * 1000))})
        value = b"u" * 1000
        start = time.monotonic()
        sent = 0
        while not self.stop.is_set():
            due = (time.monotonic() - start) * rate
            while sent < due:
                produce_one(p, topic, value, 0.01)
                sent += len(value)
            p.poll(0.01)
        p.flush(0)  # the throttled excess still queued is not waited for


async def wait_metric(b: BrokerProcess, name: str, value: float, timeout: float = 20, **labels: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if metric(b, name, **labels) == value:
                return
        except KeyError:
            pass
        assert time.monotonic() < deadline, f"{name}{labels} never {value}"
        await asyncio.sleep(0.2)


async def growth(b: BrokerProcess, topics: list[str], span: float) -> dict[str, float]:
    first = {t: log_bytes(b, t) for t in topics}
    await asyncio.sleep(span)
    return {t: (log_bytes(b, t) - first[t]) / span for t in topics}


async def test_user_quota_then_user_client_quota_take_precedence(broker: BrokerProcess,
                                                                 quota_user: QuotaUser) -> None:
    b, user = broker, quota_user
    client_quota, user_quota, user_client_quota = 1000 * KB, 200 * KB, 50 * KB
    for t in ("app", "other"):
        assert (await create_topic(b, t, check=False))["error_code"] == 0
    # Level 7 for the client id, level 3 for the user: the user's 200 kB/s applies, and to all its
    # client ids together (one bucket, tags user=ANONYMOUS, client_id="").
    alter(b.zk_connect, "--entity-type", "clients", "--entity-name", "uq-app",
          config=f"producer_byte_rate={client_quota}")
    alter(b.zk_connect, *user_entity(user), config=f"producer_byte_rate={user_quota}")
    app = ThrottledProducer(user.bootstrap(b), "uq-app", "app", 300 * KB, user.client_conf)
    other = ThrottledProducer(user.bootstrap(b), "uq-other", "other", 300 * KB, user.client_conf)
    jobs = [asyncio.ensure_future(asyncio.to_thread(p.run)) for p in (app, other)]
    try:
        await wait_metric(b, "client_quota_bytes_per_second", user_quota, user=user.name, client_id="",
                          type="produce")
        await asyncio.sleep(5)  # past the pacing bucket's first second and the clients' start
        rates = await growth(b, ["app", "other"], 15)
        shared = rates["app"] + rates["other"]
        print(f"user quota {user_quota} B/s: uq-app {rates['app']:.0f}, uq-other {rates['other']:.0f}, "
              f"together {shared:.0f} B/s")
        assert 0.85 * user_quota <= shared <= 1.15 * user_quota, rates
        assert min(rates.values()) > 0.2 * user_quota, rates  # both clients get through
        assert max(app.throttles) > 0 and max(other.throttles) > 0  # the broker said so in its responses
        text = scrape(b)
        sensors = {(s["user"], s["client_id"]) for s, _ in samples(text, "client_byte_rate") if s["type"] == "produce"}
        assert (user.name, "") in sensors and ("", "uq-app") not in sensors, sensors

        # Level 1 for uq-app: 50 kB/s in a bucket of its own; uq-other keeps the user's 200 kB/s alone.
        app.throttles.clear()
        alter(b.zk_connect, *user_entity(user, "uq-app"), config=f"producer_byte_rate={user_client_quota}")
        await wait_metric(b, "client_quota_bytes_per_second", user_client_quota, user=user.name,
                          client_id="uq-app", type="produce")
        await asyncio.sleep(5)
        rates = await growth(b, ["app", "other"], 15)
        print(f"user+client quota {user_client_quota} B/s: uq-app {rates['app']:.0f}; "
              f"uq-other under the user's {user_quota}: {rates['other']:.0f} B/s")
        assert 0.85 * user_client_quota <= rates["app"] <= 1.15 * user_client_quota, rates
        assert 0.85 * user_quota <= rates["other"] <= 1.15 * user_quota, rates
        assert max(app.throttles) > 0
        assert metric(b, "client_throttle_time_ms", user=user.name, client_id="uq-app", type="produce") > 0
    finally:
        for p in (app, other):
            p.stop.set()
        await asyncio.gather(*jobs)

    # --describe shows the three entities as kafka-configs does.
    r = configs(b.zk_connect, "--entity-type", "users", "--describe")
    assert f"Configs for user-principal '{user.name}' are producer_byte_rate={user_quota}" in r.stdout, r.stdout
    r = configs(b.zk_connect, *user_entity(user), "--entity-type", "clients", "--describe")
    assert (f"Configs for user-principal '{user.name}', client-id 'uq-app' are "
            f"producer_byte_rate={user_client_quota}") in r.stdout, r.stdout


def rate_between(marks: list[tuple[float, int]], t0: float, t1: float) -> float:
    a = max((m for m in marks if m[0] <= t0), default=marks[0])
    z = max((m for m in marks if m[0] <= t1), default=marks[-1])
    return (z[1] - a[1]) / (z[0] - a[0])


async def test_fetch_quota_of_the_default_user_over_a_client_quota(broker: BrokerProcess,
                                                                   quota_user: QuotaUser) -> None:
    b, user = broker, quota_user
    quota = 200 * KB
    assert (await create_topic(b, "data", check=False))["error_code"] == 0
    await asyncio.to_thread(produce_bytes, b.bootstrap, "data", 1, 6_000_000)
    # Level 8 (every client id: 1 MB/s) under level 6 (every user: 200 kB/s): the user's applies.
    alter(b.zk_connect, "--entity-type", "clients", "--entity-default", config="consumer_byte_rate=1000000")
    alter(b.zk_connect, "--entity-type", "users", "--entity-default", config=f"consumer_byte_rate={quota}")
    marks: list[tuple[float, int]] = []
    await asyncio.to_thread(consume_for, user.bootstrap(b), "uq-reader", "data", 18, marks, **user.client_conf)
    steady = rate_between(marks, 5, 17)  # message values; the quota also counts ~4% framing
    print(f"default user consumer quota {quota} B/s: {steady:.0f} B/s of values")
    assert 0.85 * quota <= steady * 1.04 <= 1.15 * quota, steady
    # Metered as this user (a sensor of its own under the shared <default> quota).
    assert metric(b, "client_quota_bytes_per_second", user=user.name, client_id="", type="fetch") == quota
    assert metric(b, "client_throttle_time_ms", user=user.name, client_id="", type="fetch") > 0


def create_body(name: str, partitions: int) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 30000, "validate_only": False}


async def test_mutation_quota_per_user_is_shared_by_its_client_ids(broker: BrokerProcess,
                                                                   quota_user: QuotaUser) -> None:
    b, user = broker, quota_user
    # The client id alone would allow 100 partitions/s (1100 tokens); the user has 1/s (11 tokens).
    alter(b.zk_connect, "--entity-type", "clients", "--entity-name", "uq-admin", config="controller_mutation_rate=100")
    alter(b.zk_connect, *user_entity(user), config="controller_mutation_rate=1")
    admin = AdminClient({"bootstrap.servers": user.bootstrap(b), "client.id": "uq-admin", **user.client_conf})
    # confluent-kafka sends CreateTopics v4 (permissive): 30 partitions are taken, 19 beyond the
    # bucket (the debt leaves ~19 s for the checks below, however slow the machine).
    futures = admin.create_topics([NewTopic("uq-wide", 30, 1)], operation_timeout=30)
    await asyncio.to_thread(futures["uq-wide"].result, 60)
    left = metric(b, "controller_mutation_tokens", user=user.name, client_id="")
    assert -19 <= left < 0, left  # 11 - 30, refilled at 1/s meanwhile (the client's 1100 would leave 1070)
    assert metric(b, "controller_mutation_throttle_time_ms", user=user.name, client_id="") > 0
    assert not [s for s, _ in samples(scrape(b), "controller_mutation_tokens") if s["client_id"] == "uq-admin"]

    # Another client id of the same user meets the same empty bucket: strict CreateTopics v6 refuses.
    async with await user.connect(b, "uq-strict") as conn:
        resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body("uq-one", 1), 30)
        assert [t["error_code"] for t in resp["topics"]] == [THROTTLED], resp
        assert resp["throttle_time_ms"] > 0, resp
    # A user+client quota gives that client id a bucket of its own, full: admitted at once. Each
    # try on a connection of its own: the broker reads nothing more from a refused request's
    # connection for its throttle (the user's ~19 s of debt), which would only be waited out.
    alter(b.zk_connect, *user_entity(user, "uq-strict"), config="controller_mutation_rate=10")
    deadline = time.monotonic() + 20
    while True:
        async with await user.connect(b, "uq-strict") as conn:
            resp = await conn.request(ApiKey.CREATE_TOPICS, 6, create_body("uq-one", 1), 30)
        if resp["topics"][0]["error_code"] == 0:
            break
        assert resp["topics"][0]["error_code"] == THROTTLED, resp
        assert time.monotonic() < deadline, "the user+client quota never applied"
        await asyncio.sleep(0.2)
    assert metric(b, "controller_mutation_tokens", user=user.name, client_id="uq-strict") > 100
