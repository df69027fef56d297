"""One identity per API: the ApiKey enum, the message declarations, the served-API registry."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest

from broker.apis import ALL_APIS
from broker.apis.registry import register, registered
from broker.dispatch import Dispatcher
from broker.metrics import Registry
from protocol import registry
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import MODULES
from protocol.messages import produce as produce_messages


async def _handle(ctx: Any, request: Any) -> None:
    return None


def _table() -> dict[int, tuple[int, int]]:
    return {e["api_key"]: (e["min_version"], e["max_version"]) for e in registry.api_versions_entries()}


def test_every_key_has_its_message_module() -> None:
    assert set(MODULES) == set(ApiKey)
    for key, module in MODULES.items():
        assert module.API_KEY is key and module.__name__ == f"protocol.messages.{key.name.lower()}"


def test_registering_a_key_twice_raises() -> None:
    before, table = registered(), _table()
    with pytest.raises(RuntimeError, match="Produce .* registered twice"):
        register(produce_messages, _handle)
    assert registered() == before and _table() == table


def test_registering_versions_outside_the_declaration_raises() -> None:
    with pytest.raises(ValueError, match="outside the declared"):
        register(produce_messages, _handle, versions=(0, produce_messages.VERSIONS[1] + 1))


def test_api_versions_table_is_the_registered_handlers_message_versions() -> None:
    assert ALL_APIS == registered()
    assert _table() == {api.messages.API_KEY: api.versions for api in ALL_APIS}
    # Every handler serves all its declared versions: one release's table (Kafka 2.8). Produce 3+,
    # Fetch 4+ and ListOffsets 5+ are held back only while InitProducerId is not declared
    # (broker/apis/produce.py, fetch.py, list_offsets.py), and it is.
    assert {api.key: api.versions for api in ALL_APIS if api.versions != api.messages.VERSIONS} == {}
    assert all(lo == 0 for lo, _ in _table().values())
    for api in ALL_APIS:
        assert api.key is api.messages.API_KEY and api.name == api.messages.NAME
        assert api.handle.__module__ == f"broker.apis.{api.key.name.lower()}"


def test_unsupported_version_fallback_is_a_v0_body_listing_api_versions() -> None:
    lo, hi = MODULES[ApiKey.API_VERSIONS].VERSIONS
    assert registry.unsupported_api_versions_body() == (
        struct.pack(">hi", ErrorCode.UNSUPPORTED_VERSION, 1) + struct.pack(">hhh", ApiKey.API_VERSIONS, lo, hi))


def test_dispatcher_serves_exactly_the_registered_apis() -> None:
    broker: Any = SimpleNamespace(metrics=Registry())
    d = Dispatcher(broker, ALL_APIS)
    assert set(d.handlers) == set(_table()) and d.names[ApiKey.PRODUCE] == "Produce"
    with pytest.raises(ValueError, match="registered"):
        Dispatcher(broker, ALL_APIS[:-1])
