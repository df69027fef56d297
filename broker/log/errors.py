"""Errors raised by the log layer."""

from __future__ import annotations


class LogError(Exception):
    """Base class for log storage errors."""


class OffsetOutOfRange(LogError):
    """A read asked for an offset outside [log_start_offset, log_end_offset]."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside the log's range "
                         f"[{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class InvalidAppend(LogError, ValueError):
    """An append whose offsets would go backwards, or that is not made of whole entries."""


class KafkaStorageError(LogError):
    """An I/O error on a log's files (Kafka's KafkaStorageException): the log's directory is failed.

    `operation` names what failed (append, roll, read, flush, truncate, open, close). The log
    refuses every later call: whatever its files hold now, nothing more is written to them
    until the broker restarts and recovers them.
    """

    def __init__(self, directory: object, operation: str, error: BaseException) -> None:
        super().__init__(f"{operation} failed in {directory}: {error}")
        self.directory = directory
        self.operation = operation
        self.error = error


__all__ = ["InvalidAppend", "KafkaStorageError", "LogError", "OffsetOutOfRange"]
