"""The one table of served API keys and versions; the ApiVersions response is built from it.

The data path is kept coherent with Kafka 0.10.1 (Produce 0-2, Fetch 0-3, ListOffsets 0-1,
Metadata 0-2): kafka-python infers the broker's release from these versions, and a mixed
table makes it demand features that release did not have. The admin APIs are served at
newer versions because their wire forms carry the KIP-599 quota semantics (strict mode).
"""

from __future__ import annotations

import struct

from protocol.api_keys import ApiKey

# api_key -> (min_version, max_version). Minimum 0 everywhere: librdkafka 2.0.2 stops
# compressing when Produce's minimum is above 0.
SERVED: dict[int, tuple[int, int]] = {}


def serve(api_key: int, min_version: int, max_version: int) -> None:
    """Called by broker.apis.registry.register, once per key."""
    if min_version != 0:
        raise ValueError("advertise minimum version 0 for every API")
    if api_key in SERVED:
        raise ValueError(f"api key {api_key} is served twice")
    SERVED[api_key] = (min_version, max_version)


def is_served(api_key: int, version: int) -> bool:
    rng = SERVED.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]


UNSUPPORTED_VERSION = 35

_V0_ENTRY = struct.Struct(">hhh")


def unsupported_api_versions_body() -> bytes:
    """ApiVersions v0 body with error 35, listing ApiVersions itself.

    Clients that asked for a version we do not serve read this v0 body, pick a
    version from it and retry on the same connection.
    """
    lo, hi = SERVED.get(ApiKey.API_VERSIONS, (0, 0))
    return struct.pack(">hi", UNSUPPORTED_VERSION, 1) + _V0_ENTRY.pack(ApiKey.API_VERSIONS, lo, hi)


def api_versions_entries() -> list[dict[str, int]]:
    return [
        {"api_key": key, "min_version": lo, "max_version": hi} for key, (lo, hi) in sorted(SERVED.items())
    ]
