"""One module per API key, each declaring its request and response fields (see protocol.declare).

The modules are found from protocol.api_keys: ApiKey.LIST_OFFSETS is declared in
list_offsets.py, which says `API_KEY = ApiKey.LIST_OFFSETS`. A key without its module, or a
module declaring another key, fails at import.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from protocol.api_keys import ApiKey


def _load(key: ApiKey) -> ModuleType:
    module = import_module(f"{__name__}.{key.name.lower()}")
    if module.API_KEY is not key:
        raise ImportError(f"{module.__name__} declares API_KEY {module.API_KEY!r}, expected {key!r}")
    return module


MODULES: dict[int, ModuleType] = {key: _load(key) for key in ApiKey}
