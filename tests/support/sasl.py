"""SASL for the tests: broker settings (JAAS users, listeners), each client's SASL options, and a raw
socket client for the exchanges the real clients never send (bad frames, requests out of turn)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from fetcher.connection import KafkaConnection
from fetcher.security import ClientSecurity
from protocol.framing import frame
from protocol.headers import encode_request_header, response_header_size
from protocol.schema import request_codec, response_codec

PASSWORDS = {"admin": "admin-pw-Zq81", "alice": "alice-pw-Xk42", "bob": "bob-pw-Wm77", "carol": "carol-pw-Vn13",
             "dave": "dave-pw-Ur29"}
PLAIN_USERS = ("admin", "alice")  # in the listener's JAAS config; the others get SCRAM credentials


def plain_jaas(login: str = "admin") -> str:
    users = " ".join(f'user_{u}="{PASSWORDS[u]}"' for u in PLAIN_USERS)
    return (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{login}" '
            f'password="{PASSWORDS[login]}" {users};')


def scram_jaas(login: str) -> str:
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{login}" '
            f'password="{PASSWORDS[login]}";')


def security(mechanism: str, user: str, password: str | None = None, protocol: str = "SASL_PLAINTEXT") -> ClientSecurity:
    return ClientSecurity(security_protocol=protocol, sasl_mechanism=mechanism, sasl_username=user,
                          sasl_password=PASSWORDS[user] if password is None else password)


async def sasl_connect(port: int, mechanism: str, user: str, password: str | None = None) -> KafkaConnection:
    return await KafkaConnection.open("127.0.0.1", port, client_id="sasl-test",
                                      security=security(mechanism, user, password))


def confluent_config(port: int, mechanism: str, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": PASSWORDS[user]}


def kcat_args(port: int, mechanism: str, user: str) -> list[str]:
    return ["-b", f"127.0.0.1:{port}", "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={PASSWORDS[user]}"]


def python_client_config(port: int, mechanism: str, user: str) -> dict[str, Any]:
    """kafka-python's and aiokafka's option names (the same for both)."""
    return {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}


class RawClient:
    """One plain socket speaking Kafka frames by hand: requests in any order, any bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._ids = 0

    @classmethod
    async def open(cls, port: int) -> RawClient:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        self.send_bytes(api_key, version, request_codec(api_key, version).encode(body))

    def send_bytes(self, api_key: int, version: int, body: bytes) -> None:
        self._ids += 1
        self.writer.writelines(frame(encode_request_header(api_key, version, self._ids, "raw"), body))

    def send_frame(self, payload: bytes) -> None:
        self.writer.write(struct.pack(">i", len(payload)) + payload)

    async def response(self, api_key: int, version: int, timeout: float = 30) -> dict[str, Any]:
        head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        data = await asyncio.wait_for(self.reader.readexactly(struct.unpack(">i", head)[0]), timeout)
        skip = response_header_size(api_key, version, data)
        return response_codec(api_key, version).decode(memoryview(data)[skip:])

    async def closed(self, timeout: float = 30) -> bool:
        """True once the broker has closed the connection (EOF or reset); responses before it are skipped."""
        try:
            await asyncio.wait_for(self.reader.read(), timeout)
        except ConnectionError:
            return True
        return self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()
