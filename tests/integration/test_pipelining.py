"""Issue 21: a connection's next requests are read while earlier ones wait, and answered in order.

Raw sockets send several requests at once and read the responses back: their correlation ids
come back in request order, each response is the right one for its request, and what a later
request did (an append) is visible while an earlier one still waits (a long-poll Fetch, an
acks=all Produce whose follower is stopped): the broker read it without waiting for the
earlier answer. Nothing here measures time; a broker that did not pipeline would leave the
reads below waiting (their generous limits are only there to fail instead of hanging).
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Callable
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.headers import encode_request_header, response_header_size
from protocol.records.message_set import build_message_set
from protocol.records.records import decode_records
from protocol.schema import request_codec, response_codec
from tests.support.brokers import BrokerProcess
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, fetch

LONG_MS = 120_000
FAIL_AFTER_S = 60  # far below LONG_MS: a broker that did not pipeline fails here


class RawClient:
    """One socket; requests are sent as given and responses read back with their correlation ids."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.next_id = 1
        self.sent: dict[int, tuple[ApiKey, int]] = {}

    @classmethod
    async def open(cls, broker: BrokerProcess) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        return cls(reader, writer)

    def send(self, key: ApiKey, version: int, body: dict[str, Any]) -> int:
        cid = self.next_id
        self.next_id += 1
        header = encode_request_header(key, version, cid, "pipeliner")
        self.writer.writelines(frame(header, request_codec(key, version).encode(body)))
        self.sent[cid] = (key, version)
        return cid

    async def read(self) -> tuple[int, dict[str, Any]]:
        """The next response: its correlation id, and its body."""
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        data = await self.reader.readexactly(size)
        (cid,) = struct.unpack(">i", data[:4])
        # Decoded as the request its correlation id names, so that an answer out of order fails
        # the order assertions rather than the decoding.
        key, version = self.sent.pop(cid)
        body = response_codec(key, version).decode(memoryview(data)[response_header_size(key, version, data):])
        return cid, body

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def produce_body(topic: str, partition: int, values: list[bytes], acks: int) -> dict[str, Any]:
    data = build_message_set([(None, v, 1_700_000_000_000) for v in values], magic=1)
    return {"acks": acks, "timeout_ms": LONG_MS,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}]}


def fetch_body(topic: str, partition: int, offset: int, max_wait_ms: int = LONG_MS) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                        "partition_max_bytes": 1 << 20}]}]}


def metadata_body(*topics: str) -> dict[str, Any]:
    return {"topics": [{"name": t} for t in topics]}


def values_of(records: bytes) -> list[bytes]:
    return [bytes(r.value) for r in decode_records(records) if r.value is not None]


def produced(resp: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = resp["responses"][0]["partition_responses"][0]
    return out


def fetched(resp: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = resp["responses"][0]["partitions"][0]
    return out


async def test_a_long_poll_is_answered_with_what_the_next_request_on_its_connection_appended(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(0)
    await create_topic(broker, "poll")
    client = await RawClient.open(broker)
    try:
        # The Fetch waits for a record (min_bytes 1, a two-minute wait); the Produce behind it on
        # the same connection supplies one, so only a broker that read the Produce while the
        # Fetch waited can answer the Fetch with it.
        fetch_id = client.send(ApiKey.FETCH, 3, fetch_body("poll", 0, 0))
        produce_id = client.send(ApiKey.PRODUCE, 2, produce_body("poll", 0, [b"behind the poll"], acks=1))
        metadata_id = client.send(ApiKey.METADATA, 1, metadata_body("poll"))
        await client.writer.drain()
        answers = [await asyncio.wait_for(client.read(), FAIL_AFTER_S) for _ in range(3)]
    finally:
        await client.close()
    assert [cid for cid, _ in answers] == [fetch_id, produce_id, metadata_id]
    got = fetched(answers[0][1])
    assert got["error_code"] == ErrorCode.NONE and values_of(got["records"]) == [b"behind the poll"]
    assert produced(answers[1][1])["error_code"] == ErrorCode.NONE and produced(answers[1][1])["base_offset"] == 0
    topics = answers[2][1]["topics"]
    assert [t["name"] for t in topics] == ["poll"] and topics[0]["error_code"] == ErrorCode.NONE


async def test_requests_behind_a_waiting_acks_all_produce_are_read_and_answered_after_it(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    # The follower is stopped, not gone: it stays in the ISR (lag time and session timeout far
    # away), so the acks=all Produce waits until it is resumed.
    leader = broker_factory(0, replica_lag_time_max_ms="120000")
    follower = broker_factory(1, replica_lag_time_max_ms="120000", zookeeper_session_timeout_ms="60000")
    await create_topic(leader, "all", assignment={0: [0, 1]})
    await create_topic(leader, "side", assignment={0: [0]})
    async with await connect(leader) as conn:  # the follower is in sync before it stops
        await wait_for("the follower in the ISR", lambda: _isr_has(leader, "all", 1))
        assert (await fetch(conn, [("all", 0, 0, 1024)]))[("all", 0)]["error_code"] == ErrorCode.NONE
    follower.pause()
    client = await RawClient.open(leader)
    try:
        all_id = client.send(ApiKey.PRODUCE, 2, produce_body("all", 0, [b"waits for the follower"], acks=-1))
        side_id = client.send(ApiKey.PRODUCE, 2, produce_body("side", 0, [b"read meanwhile"], acks=1))
        metadata_id = client.send(ApiKey.METADATA, 1, metadata_body("all", "side"))
        await client.writer.drain()

        async def side_appended() -> bool:
            async with await connect(leader) as conn:
                got = (await fetch(conn, [("side", 0, 0, 1024)]))[("side", 0)]
                return got["high_watermark"] == 1 and values_of(got["records"]) == [b"read meanwhile"]

        # The second Produce was appended while the first still waits for its follower ...
        await wait_for("the Produce behind the waiting one appended", side_appended, timeout=FAIL_AFTER_S)
        async with await connect(leader) as conn:
            waiting = (await fetch(conn, [("all", 0, 0, 1024)]))[("all", 0)]
        assert waiting["high_watermark"] == 0  # ... which has not completed: the follower has not fetched it
        follower.resume()
        answers = [await asyncio.wait_for(client.read(), FAIL_AFTER_S) for _ in range(3)]
    finally:
        follower.resume()
        await client.close()
    # ... and the answers still come in request order, each the right one.
    assert [cid for cid, _ in answers] == [all_id, side_id, metadata_id]
    assert produced(answers[0][1])["error_code"] == ErrorCode.NONE and produced(answers[0][1])["base_offset"] == 0
    assert produced(answers[1][1])["error_code"] == ErrorCode.NONE and produced(answers[1][1])["base_offset"] == 0
    assert sorted(t["name"] for t in answers[2][1]["topics"]) == ["all", "side"]


async def _isr_has(broker: BrokerProcess, topic: str, replica: int) -> bool:
    async with await connect(broker) as conn:
        resp = await conn.request(ApiKey.METADATA, 1, metadata_body(topic))
    parts = resp["topics"][0]["partitions"]
    return bool(parts) and replica in parts[0]["isr_nodes"]


async def test_interleaved_requests_from_several_clients_keep_each_connections_order(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    leader = broker_factory(0)
    broker_factory(1)
    await create_topic(leader, "mix", assignment={0: [0, 1], 1: [0, 1]})
    async with await connect(leader) as conn:
        await wait_for("the follower in the ISR", lambda: _isr_has(leader, "mix", 1))
        assert (await fetch(conn, [("mix", 0, 0, 1024)]))[("mix", 0)]["error_code"] == ErrorCode.NONE
    clients = 4
    per_client = 40

    async def run(n: int) -> list[tuple[int, str, dict[str, Any]]]:
        """Each client sends a random mix at once; returns (correlation id, kind, body) as answered."""
        rng = random.Random(n)
        client = await RawClient.open(leader)
        kinds: dict[int, str] = {}
        try:
            for i in range(per_client):
                kind = rng.choice(["acks=all", "acks=1", "fetch", "metadata"])
                if kind.startswith("acks"):
                    value = f"c{n}-{i}".encode()
                    cid = client.send(ApiKey.PRODUCE, 2, produce_body("mix", n % 2, [value],
                                                                      acks=-1 if kind == "acks=all" else 1))
                elif kind == "fetch":  # a short long poll on the other partition
                    cid = client.send(ApiKey.FETCH, 3, fetch_body("mix", (n + 1) % 2, 0, max_wait_ms=50))
                else:
                    cid = client.send(ApiKey.METADATA, 1, metadata_body("mix"))
                kinds[cid] = kind
            await client.writer.drain()
            out = []
            for _ in range(per_client):
                cid, body = await asyncio.wait_for(client.read(), FAIL_AFTER_S)
                out.append((cid, kinds[cid], body))
            return out
        finally:
            await client.close()

    results = await asyncio.gather(*(run(n) for n in range(clients)))
    for n, answers in enumerate(results):
        assert [cid for cid, _, _ in answers] == list(range(1, per_client + 1))
        for _, kind, body in answers:
            if kind.startswith("acks"):
                assert produced(body)["error_code"] == ErrorCode.NONE
            elif kind == "fetch":
                assert fetched(body)["error_code"] == ErrorCode.NONE
            else:
                assert [t["name"] for t in body["topics"]] == ["mix"]
        # One connection's appends keep its order: increasing offsets in the order sent.
        offsets = [produced(body)["base_offset"] for _, kind, body in answers if kind.startswith("acks")]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), n

    expected = {n: sum(1 for _, kind, _ in results[n] if kind.startswith("acks")) for n in range(clients)}

    async def readable() -> dict[int, list[str]] | None:
        """Each client's values as the partitions hold them, once all are under the high watermark
        (the last acks=1 produces may still be on their way to the follower)."""
        by_client: dict[int, list[str]] = {}
        async with await connect(leader) as conn:
            for partition in (0, 1):
                got = (await fetch(conn, [("mix", partition, 0, 1 << 20)]))[("mix", partition)]
                for v in values_of(got["records"]):
                    text = v.decode()
                    by_client.setdefault(int(text.split("-")[0][1:]), []).append(text)
        done = all(len(by_client.get(n, [])) == expected[n] for n in range(clients))
        return by_client if done else None

    held = await wait_for("every acknowledged value readable", readable)
    for n in range(clients):
        sent = [int(v.split("-")[1]) for v in held.get(n, [])]
        assert sent == sorted(sent), (n, sent)  # in the order the client sent them
