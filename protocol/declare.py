"""The declaration vocabulary of protocol/messages: one F per field, as in Kafka's JSON definitions."""

from __future__ import annotations

from typing import Any, NamedTuple


class F(NamedTuple):
    name: str
    type: str  # int8..int64, uint16, float64, bool, string, bytes, records, uuid, []<prim>, struct, []struct
    versions: tuple[int, int]
    nullable: tuple[int, int] | None = None
    default: Any = None
    tag: int | None = None
    fields: tuple[F, ...] = ()

    def present(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]
