"""protocol/messages/types.py: in step with the declarations, and true to what the codecs produce."""

from __future__ import annotations

import enum
import types as pytypes
import typing
from typing import Any

import pytest

from protocol.declare import F
from protocol.messages import MODULES
from protocol.messages import types as T
from protocol.messages.gen_types import TARGET, render
from protocol.schema import default_of, request_codec, response_codec


def test_committed_module_is_what_the_generator_writes() -> None:
    assert TARGET.read_text(encoding="utf-8") == render(), (
        "protocol/messages/types.py is out of date: run python -m protocol.messages.gen_types")


def test_every_api_has_a_typed_descriptor() -> None:
    for key, m in MODULES.items():
        api = getattr(T, m.__name__.rsplit(".", 1)[1].upper())
        assert (api.key, api.name) == (key, m.NAME)
        assert typing.is_typeddict(getattr(T, f"{m.NAME}Request"))
        assert typing.is_typeddict(getattr(T, f"{m.NAME}Response"))


def test_generator_takes_enum_api_keys() -> None:
    class Key(enum.IntEnum):
        THING = 42

    mod = pytypes.ModuleType("protocol.messages.thing")
    mod.API_KEY, mod.NAME, mod.VERSIONS = Key.THING, "Thing", (0, 1)
    mod.REQUEST = (F("a", "int32", (0, 1)), F("b", "[]struct", (1, 1), nullable=(1, 1), fields=(
        F("c", "uuid", (1, 1)),)))
    mod.RESPONSE = ()
    text = render({Key.THING: mod})
    assert "# ---- Thing (key 42), versions 0-1" in text
    assert "    b: NotRequired[list[ThingRequestB] | None]\n" in text
    assert "    c: uuid.UUID\n" in text and "import uuid\n" in text
    assert "THING: Api[ThingRequest, ThingResponse] = Api(thing.API_KEY, thing.NAME)" in text


def _sample(fields: tuple[F, ...], version: int) -> dict[str, Any]:
    """A body with every field of `version` at its default and one element in each struct array."""
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        if f.type == "[]struct":
            out[f.name] = [_sample(f.fields, version)]
        elif f.type == "struct":
            out[f.name] = _sample(f.fields, version)
        else:
            out[f.name] = default_of(f, version)
    return out


def _typeddict_in(annotation: Any) -> Any:
    if typing.is_typeddict(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        found = _typeddict_in(arg)
        if found is not None:
            return found
    return None


def _conforms(value: dict[str, Any], td: Any, where: str) -> None:
    missing = td.__required_keys__ - value.keys()
    unknown = value.keys() - td.__required_keys__ - td.__optional_keys__
    assert not missing and not unknown, f"{where}: missing {sorted(missing)}, not declared {sorted(unknown)}"
    hints = typing.get_type_hints(td)
    for name, v in value.items():
        sub = _typeddict_in(hints[name])
        if sub is None:
            continue
        for item in v if isinstance(v, list) else [v]:
            _conforms(item, sub, f"{where}.{name}")


@pytest.mark.parametrize("key", sorted(MODULES))
def test_decoded_bodies_have_the_typed_keys(key: int) -> None:
    m = MODULES[key]
    lo, hi = m.VERSIONS
    for version in range(lo, hi + 1):
        for side, fields, codec in (("Request", m.REQUEST, request_codec), ("Response", m.RESPONSE, response_codec)):
            c = codec(key, version)
            decoded = c.decode(c.encode(_sample(fields, version)))
            _conforms(decoded, getattr(T, f"{m.NAME}{side}"), f"{m.NAME}{side} v{version}")
