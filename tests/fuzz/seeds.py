"""The seed corpus: request frames kept in `seeds/` as `<api>-v<version>-<client>-<n>.bin`.

A seed is one request frame without its size prefix (header and body), exactly as a client
sent it. The inter-broker requests name broker endpoints; before a run they are re-encoded to
point at the broker under test only (`retarget`), and `endpoints_safe` lets the fuzzer drop a
mutant that would send that broker's replica fetcher anywhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.api_keys import ApiKey
from protocol.headers import decode_request_header, encode_request_header
from protocol.schema import request_codec

SEED_DIR = Path(__file__).parent / "seeds"
_NAME = re.compile(r"^(?P<api>[a-z_]+)-v(?P<version>\d+)-(?P<client>[a-z0-9_]+)-(?P<n>\d+)\.bin$")
LOOPBACK = "127.0.0.1"
# APIs whose requests carry broker endpoints that the broker may connect to (LeaderAndIsr's
# live leaders) or hand to clients (UpdateMetadata's live brokers).
ENDPOINT_APIS = (ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA)


@dataclass(frozen=True)
class Seed:
    api_key: int
    api_version: int
    client: str
    frame: bytes

    @property
    def name(self) -> str:
        return f"{ApiKey(self.api_key).name.lower()}-v{self.api_version}-{self.client}"


def seed_file_name(api_key: int, version: int, client: str, n: int) -> str:
    return f"{ApiKey(api_key).name.lower()}-v{version}-{client}-{n}.bin"


def load_seeds(directory: Path = SEED_DIR) -> list[Seed]:
    seeds = []
    for path in sorted(directory.glob("*.bin")):
        m = _NAME.match(path.name)
        if m is None:
            continue
        seeds.append(Seed(int(ApiKey[m["api"].upper()]), int(m["version"]), m["client"], path.read_bytes()))
    return seeds


def _endpoints(api_key: int, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The dicts holding host/port pairs in a decoded LeaderAndIsr or UpdateMetadata body."""
    if api_key == ApiKey.LEADER_AND_ISR:
        return list(body.get("live_leaders") or [])
    out: list[dict[str, Any]] = []
    for b in body.get("live_brokers") or []:
        if "v0_host" in b:
            out.append(b)
        out.extend(b.get("endpoints") or [])
    return out


def _host_port(e: dict[str, Any]) -> tuple[str, int]:
    return (e["host_name"], e["port"]) if "host_name" in e else \
        (e["v0_host"], e["v0_port"]) if "v0_host" in e else (e["host"], e["port"])


def _set_host_port(e: dict[str, Any], port: int) -> None:
    if "host_name" in e:
        e["host_name"], e["port"] = LOOPBACK, port
    elif "v0_host" in e:
        e["v0_host"], e["v0_port"] = LOOPBACK, port
    else:
        e["host"], e["port"] = LOOPBACK, port


def retarget(seed: Seed, port: int) -> Seed:
    """The seed with every endpoint it names set to 127.0.0.1:`port` (the broker under test)."""
    if seed.api_key not in ENDPOINT_APIS:
        return seed
    header, at = decode_request_header(seed.frame)
    codec = request_codec(seed.api_key, seed.api_version)
    body = codec.decode(memoryview(seed.frame)[at:])
    for e in _endpoints(seed.api_key, body):
        _set_host_port(e, port)
    head = encode_request_header(seed.api_key, seed.api_version, header.correlation_id, header.client_id or "")
    return Seed(seed.api_key, seed.api_version, seed.client, head + codec.encode(body))


def endpoints_safe(frame: bytes, port: int) -> bool:
    """False when the broker would read a broker endpoint other than 127.0.0.1:`port` from `frame`.

    The broker decodes these APIs with the same codec, so what fails to decode here is
    refused there too, and what decodes here is exactly what the broker would act on.
    """
    try:
        header, at = decode_request_header(frame)
    except Exception:  # noqa: BLE001 - a header the broker cannot read names no endpoint
        return True
    if header.api_key not in ENDPOINT_APIS:
        return True
    try:
        body = request_codec(header.api_key, header.api_version).decode(memoryview(frame)[at:])
    except Exception:  # noqa: BLE001 - refused (or crashed on) before any endpoint is used
        return True
    return all(_host_port(e) == (LOOPBACK, port) for e in _endpoints(header.api_key, body))
