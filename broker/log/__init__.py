"""Log storage: segmented message-set files with a sparse offset index and crash recovery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.log.errors import InvalidAppend, KafkaStorageError, LogError, OffsetOutOfRange

if TYPE_CHECKING:
    from broker.log.log import FileSlice, Log

__all__ = ["FileSlice", "InvalidAppend", "KafkaStorageError", "Log", "LogError", "OffsetOutOfRange"]


def __getattr__(name: str) -> object:
    # Log and FileSlice bring the record codecs (and numpy) with them: loaded when first asked
    # for, so that a light submodule (page_cache's default window, which the config reads) does
    # not load them into every command-line tool.
    if name in ("FileSlice", "Log"):
        from broker.log import log

        return getattr(log, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
