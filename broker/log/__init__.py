"""Log storage: segmented message-set files with a sparse offset index and crash recovery."""

from broker.log.errors import InvalidAppend, LogError, OffsetOutOfRange
from broker.log.log import FileSlice, Log

__all__ = ["FileSlice", "InvalidAppend", "Log", "LogError", "OffsetOutOfRange"]
