"""The one list of served APIs: each module in broker/apis registers its handler here, at import.

An API's key, name and versions come from its declaration in protocol/messages; registering
puts the key in protocol.registry's ApiVersions table, and the dispatcher serves exactly
what is registered. As franz-go's kfake (regKey), registering a key twice fails at import,
so two handlers can never claim one key. A handler that serves fewer versions than its
messages module declares says so in its registration (`versions=`), and nowhere else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from protocol import registry as served
from protocol.api_keys import ApiKey

Handler = Callable[..., Awaitable[Any]]
Decoder = Callable[[memoryview, int], Any]


@dataclass(frozen=True)
class Api:
    messages: ModuleType
    handle: Handler
    decode: Decoder | None  # None: the body codec built from the messages module
    versions: tuple[int, int]

    @property
    def key(self) -> ApiKey:
        return ApiKey(self.messages.API_KEY)

    @property
    def name(self) -> str:
        return str(self.messages.NAME)


_REGISTERED: dict[ApiKey, Api] = {}


def register(messages: ModuleType, handle: Handler, decode: Decoder | None = None,
             versions: tuple[int, int] | None = None) -> Api:
    """Serve `messages`' API with `handle`, at all its declared versions unless `versions` narrows them."""
    key = ApiKey(messages.API_KEY)
    declared: tuple[int, int] = messages.VERSIONS
    lo, hi = declared if versions is None else versions
    if not declared[0] <= lo <= hi <= declared[1]:
        raise ValueError(f"{messages.NAME}: versions {lo}-{hi} outside the declared {declared[0]}-{declared[1]}")
    existing = _REGISTERED.get(key)
    if existing is not None:
        raise RuntimeError(f"{messages.NAME} (key {int(key)}) registered twice: by "
                           f"{existing.handle.__module__} and {handle.__module__}")
    served.serve(key, lo, hi)
    api = Api(messages, handle, decode, (lo, hi))
    _REGISTERED[key] = api
    return api


def registered() -> list[Api]:
    """Every registered API, by key."""
    return [_REGISTERED[key] for key in sorted(_REGISTERED)]
