"""Body codecs built from the declarations in protocol/messages: `request_codec(key, version)`.

Decoding yields dicts keyed by Kafka's field names in snake_case, holding only the fields of
that version; encoding fills whatever is missing with Kafka's defaults. Unknown tagged fields
are skipped on decode, and on encode a tagged field is written only when it differs from its
default, so flexible responses carry an empty tagged section unless there is something to say
(Debian's kcat fails on longer ones). Trailing bytes after a body are ignored; truncation is a
ProtocolError. The data path (Produce, Fetch) has its own struct codecs in protocol.fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from protocol.declare import F
from protocol.errors import ProtocolError
from protocol.messages import MODULES
from protocol.primitives import Reader, Writer

_FIXED = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "float64": 8, "bool": 1, "uuid": 16}
_ZERO: dict[str, Any] = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0,
                         "bool": False, "uuid": None, "string": "", "bytes": b""}


def flexible(api_key: int, version: int, request: bool = True) -> bool:
    m = MODULES.get(api_key)
    if m is None:
        return False
    first = m.FLEXIBLE_REQUEST_FROM if request else m.FLEXIBLE_RESPONSE_FROM
    return first is not None and version >= first


def default_of(f: F, version: int) -> Any:
    if f.default is not None:
        return f.default
    if f.nullable_in(version) or f.type == "records":
        return None
    if f.type.startswith("[]"):
        return []
    if f.type == "struct":
        return {sub.name: default_of(sub, version) for sub in f.fields if sub.present(version)}
    return _ZERO[f.type]


# ---- decoding ----------------------------------------------------------------------------------

Decoder = Callable[[Reader], Any]


def _scalar_decoder(t: str, flex: bool, nullable: bool) -> Decoder:
    if t in _FIXED:
        read: Decoder = getattr(Reader, t)
        return read
    if t == "string":
        return lambda r: r.string(flex, nullable)
    if t in ("bytes", "records"):
        return lambda r: r.bytes(flex, nullable)
    raise ValueError(f"unknown type {t}")


def _field_decoder(f: F, version: int, flex: bool) -> Decoder:
    nullable = f.nullable_in(version)
    if f.type == "struct":
        return _struct_decoder(f.fields, version, flex)
    if f.type.startswith("[]"):
        elem_t = f.type[2:]
        elem = _struct_decoder(f.fields, version, flex) if elem_t == "struct" else _scalar_decoder(elem_t, flex, False)
        size = _FIXED.get(elem_t, 1)

        def array(r: Reader) -> list[Any] | None:
            n = r.array_length(flex, nullable, size)
            return None if n is None else [elem(r) for _ in range(n)]
        return array
    return _scalar_decoder(f.type, flex, nullable)


def _struct_decoder(fields: tuple[F, ...], version: int, flex: bool) -> Callable[[Reader], dict[str, Any]]:
    plain = [(f.name, _field_decoder(f, version, flex)) for f in fields if f.present(version) and f.tag is None]
    tagged = {f.tag: (f, _field_decoder(f, version, flex)) for f in fields
              if f.present(version) and f.tag is not None} if flex else {}

    def struct(r: Reader) -> dict[str, Any]:
        out = {name: dec(r) for name, dec in plain}
        if flex:
            for f, _ in tagged.values():
                out[f.name] = default_of(f, version)
            for tag, payload in r.tagged_fields().items():
                known = tagged.get(tag)
                if known is not None:
                    out[known[0].name] = known[1](Reader(payload))
        return out
    return struct


# ---- encoding ----------------------------------------------------------------------------------

Encoder = Callable[[Writer, Any], None]


def _scalar_encoder(t: str, flex: bool) -> Encoder:
    if t in _FIXED:
        method = getattr(Writer, t)
        return lambda w, v: method(w, v)
    if t == "string":
        return lambda w, v: w.string(v, flex)
    if t in ("bytes", "records"):
        return lambda w, v: w.bytes(v, flex)
    raise ValueError(f"unknown type {t}")


def _field_encoder(f: F, version: int, flex: bool) -> Encoder:
    if f.type == "struct":
        return _struct_encoder(f.fields, version, flex)
    if f.type.startswith("[]"):
        elem_t = f.type[2:]
        elem = _struct_encoder(f.fields, version, flex) if elem_t == "struct" else _scalar_encoder(elem_t, flex)

        def array(w: Writer, v: list[Any] | None) -> None:
            if v is None:
                w.array_length(None, flex)
                return
            w.array_length(len(v), flex)
            for item in v:
                elem(w, item)
        return array
    return _scalar_encoder(f.type, flex)


def _struct_encoder(fields: tuple[F, ...], version: int, flex: bool) -> Encoder:
    plain = [(f.name, f, _field_encoder(f, version, flex)) for f in fields if f.present(version) and f.tag is None]
    tagged = [(f.tag, f, _field_encoder(f, version, flex)) for f in fields
              if f.present(version) and f.tag is not None] if flex else []

    def struct(w: Writer, d: dict[str, Any]) -> None:
        for name, f, enc in plain:
            v = d.get(name, _MISSING)
            enc(w, default_of(f, version) if v is _MISSING else v)
        if flex:
            present = []
            for tag, f, enc in tagged:
                v = d.get(f.name, _MISSING)
                if v is _MISSING or v == default_of(f, version):
                    continue
                sub = Writer()
                enc(sub, v)
                present.append((tag, sub.getvalue()))
            w.tagged_fields(present)
    return struct


_MISSING = object()


class Codec:
    """Encoder and decoder of one message body at one version."""

    def __init__(self, api_key: int, version: int, request: bool) -> None:
        m = MODULES[api_key]
        self.api_key = api_key
        self.version = version
        self.request = request
        self.fields: tuple[F, ...] = m.REQUEST if request else m.RESPONSE
        self.flexible = flexible(api_key, version, request)
        self._decode = _struct_decoder(self.fields, version, self.flexible)
        self._encode = _struct_encoder(self.fields, version, self.flexible)

    def decode(self, buf: bytes | bytearray | memoryview) -> dict[str, Any]:
        try:
            return self._decode(Reader(buf))
        except ProtocolError:
            raise
        except (ValueError, IndexError, OverflowError) as e:
            raise ProtocolError(f"malformed {MODULES[self.api_key].NAME} v{self.version}: {e}") from e

    def encode(self, body: Mapping[str, Any]) -> bytes:
        w = Writer()
        self._encode(w, body)
        return w.getvalue()


def _check(api_key: int, version: int) -> None:
    m = MODULES.get(api_key)
    if m is None:
        raise ProtocolError(f"no schema for api key {api_key}")
    lo, hi = m.VERSIONS
    if not lo <= version <= hi:
        raise ProtocolError(f"no schema for {m.NAME} v{version}")


@cache
def request_codec(api_key: int, version: int) -> Codec:
    _check(api_key, version)
    return Codec(api_key, version, True)


@cache
def response_codec(api_key: int, version: int) -> Codec:
    _check(api_key, version)
    return Codec(api_key, version, False)


def declared_versions() -> dict[int, tuple[int, int]]:
    return {k: m.VERSIONS for k, m in MODULES.items()}
