"""Log storage: segmented message-set files with a sparse offset index and crash recovery."""

from broker.log.errors import InvalidAppend, KafkaStorageError, LogError, OffsetOutOfRange
from broker.log.log import FileSlice, Log

__all__ = ["FileSlice", "InvalidAppend", "KafkaStorageError", "Log", "LogError", "OffsetOutOfRange"]
