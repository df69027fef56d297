"""DescribeClientQuotas and AlterClientQuotas (keys 48/49, v0-1) on a real broker, against `minibroker configs`.

Both APIs work on the znodes the configs tool writes, so each side reads what the other wrote;
an alteration reaches the broker's quotas through its config watch. Neither confluent-kafka
nor kafka-python has an admin call for these APIs, so the requests are the project's own
(their bytes are checked against kafka-python's JSON-generated classes in
tests/unit/test_protocol_schema.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess
from tests.support.metrics import metric
from tests.support.tools import configs
from tests.support.topics import create_topic
from tests.support.wire import connect, fetch, produce

pytestmark = pytest.mark.integration

USER, CLIENT = "user", "client-id"


def component(etype: str, match: str | None = None, match_type: int = 0) -> dict[str, Any]:
    return {"entity_type": etype, "match_type": match_type, "match": match}


def entity(*parts: tuple[str, str | None]) -> list[dict[str, Any]]:
    return [{"entity_type": t, "entity_name": n} for t, n in parts]


def op(key: str, value: float = 0.0, remove: bool = False) -> dict[str, Any]:
    return {"key": key, "value": value, "remove": remove}


def described(resp: dict[str, Any]) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert resp["error_code"] == 0, resp
    return {tuple(sorted((e["entity_type"], e["entity_name"]) for e in entry["entity"])):
            {v["key"]: v["value"] for v in entry["values"]} for entry in resp["entries"]}


async def test_alter_and_describe_client_quotas_as_kafka(broker_factory) -> None:  # noqa: ANN001
    b: BrokerProcess = broker_factory(0, metrics=True, num_partitions="1")
    r = configs(b.zk_connect, "--entity-type", "clients", "--entity-name", "uq-api", "--alter",
                "--add-config", "producer_byte_rate=1000000")
    assert r.returncode == 0, r.stderr
    async with await connect(b, "uq-api") as conn:
        for version in (0, 1):
            resp = await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, version, {"validate_only": False, "entries": [
                {"entity": entity((USER, "ANONYMOUS"), (CLIENT, "uq-api")), "ops": [op("producer_byte_rate", 30000)]},
                {"entity": entity((USER, None)), "ops": [op("consumer_byte_rate", 1e6),
                                                         op("controller_mutation_rate", 2.5)]},
                {"entity": entity((USER, "x")), "ops": [op("nope", 1)]},
                {"entity": entity((USER, "x")), "ops": [op("producer_byte_rate", 1.5)]},
                {"entity": [], "ops": [op("producer_byte_rate", 1)]},
                {"entity": entity((USER, "")), "ops": [op("producer_byte_rate", 1)]},
                {"entity": entity((USER, "..")), "ops": [op("producer_byte_rate", 1)]},
            ]})
            codes = [(e["error_code"], e["error_message"]) for e in resp["entries"]]
            assert codes[:2] == [(0, None), (0, None)], codes
            assert [c for c, _ in codes[2:]] == [ErrorCode.INVALID_REQUEST] * 5, codes
            assert [m for _, m in codes[2:]] == ["Invalid configuration key nope",
                                                "Configuration producer_byte_rate must be a LONG value",
                                                "Invalid empty client quota entity", "Empty user not supported",
                                                "Invalid entity name '..'"]
            assert resp["entries"][1]["entity"] == entity((USER, None))
        # validate_only writes nothing; removing a key does.
        resp = await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": True, "entries": [
            {"entity": entity((USER, "ANONYMOUS"), (CLIENT, "uq-api")), "ops": [op("producer_byte_rate", 5)]}]})
        assert resp["entries"][0]["error_code"] == 0
        resp = await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [
            {"entity": entity((USER, None)), "ops": [op("controller_mutation_rate", remove=True)]}]})
        assert resp["entries"][0]["error_code"] == 0

        # What the tool shows is what the API wrote (the same znodes).
        r = configs(b.zk_connect, "--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients",
                    "--entity-name", "uq-api", "--describe")
        assert "Configs for user-principal 'ANONYMOUS', client-id 'uq-api' are producer_byte_rate=30000" in r.stdout
        r = configs(b.zk_connect, "--entity-type", "users", "--entity-default", "--describe")
        assert "Configs for default user-principal are consumer_byte_rate=1000000" in r.stdout, r.stdout

        # Kafka's filters (ZkAdminManager.handleDescribeClientQuotas), both versions.
        cases = [
            ([component(USER, "ANONYMOUS")], False, {((CLIENT, "uq-api"), (USER, "ANONYMOUS")): {
                "producer_byte_rate": 30000.0}}),
            ([component(USER, "ANONYMOUS")], True, {}),
            ([component(USER, match_type=1)], True, {((USER, None),): {"consumer_byte_rate": 1e6}}),
            ([component(CLIENT, match_type=2)], True, {((CLIENT, "uq-api"),): {"producer_byte_rate": 1e6}}),
            ([], False, {((CLIENT, "uq-api"), (USER, "ANONYMOUS")): {"producer_byte_rate": 30000.0},
                         ((USER, None),): {"consumer_byte_rate": 1e6},
                         ((CLIENT, "uq-api"),): {"producer_byte_rate": 1e6}}),
        ]
        for version in (0, 1):
            for components, strict, want in cases:
                resp = await conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version,
                                          {"components": components, "strict": strict})
                assert described(resp) == want, (components, strict)
        for components, code in (([component("ip", "1.2.3.4"), component(USER, "a")], ErrorCode.INVALID_REQUEST),
                                 ([component(USER, "a"), component(USER, "b")], ErrorCode.INVALID_REQUEST),
                                 ([component("group", "g")], ErrorCode.UNSUPPORTED_VERSION),
                                 ([component(CLIENT, ".")], ErrorCode.INVALID_REQUEST)):  # not a znode name
            resp = await conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components, "strict": True})
            assert resp["error_code"] == code and resp["entries"] is None, resp

    # The alterations reached the broker's quotas: uq-api produces under (ANONYMOUS, uq-api) at 30 kB/s,
    # and consumes under the <default> user's 1 MB/s, counted as the user ANONYMOUS. A restarted
    # broker finds the same entities at start-up (nested <user>/clients/<id> included).
    assert (await create_topic(b, "uq-api", check=False))["error_code"] == 0
    await quotas_in_force(b)
    b.stop()
    b.start()
    await quotas_in_force(b)


async def quotas_in_force(b: BrokerProcess) -> None:
    want = {("ANONYMOUS", "uq-api", "produce"): 30000, ("ANONYMOUS", "", "fetch"): 1e6}
    deadline = time.monotonic() + 20
    async with await connect(b, "uq-api") as conn:
        while True:
            await produce(conn, "uq-api", 0, [(None, b"q" * 100)])
            await fetch(conn, [("uq-api", 0, 0, 1000)])
            try:
                got = {k: metric(b, "client_quota_bytes_per_second", user=k[0], client_id=k[1], type=k[2])
                       for k in want}
                if got == want:
                    return
            except KeyError:
                pass
            assert time.monotonic() < deadline, "the altered quotas never reached the broker"
            await asyncio.sleep(0.2)


async def test_concurrent_alterations_of_one_entity_all_apply(broker_factory) -> None:  # noqa: ANN001
    # Found by the fuzz: two writers between one's read and its conditional set (BadVersion) must
    # not fail the request; the entity ends with one of the values written.
    b: BrokerProcess = broker_factory(0)

    async def one(i: int) -> int:
        async with await connect(b, f"w{i}") as conn:
            resp = await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [
                {"entity": entity((USER, "alice"), (CLIENT, None)), "ops": [op("producer_byte_rate", 1000 + i)]}]})
            return int(resp["entries"][0]["error_code"])

    assert await asyncio.gather(*(one(i) for i in range(12))) == [0] * 12
    async with await connect(b) as conn:
        resp = await conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"strict": True, "components": [
            component(USER, "alice"), component(CLIENT, match_type=1)]})
    [(ent, values)] = described(resp).items()
    assert ent == ((CLIENT, None), (USER, "alice")) and 1000 <= values["producer_byte_rate"] < 1012
    assert "Traceback" not in b.log()
