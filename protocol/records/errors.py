"""The one error record validation raises; it carries the Kafka error code the partition gets."""

from __future__ import annotations

from protocol.errors import ErrorCode


class RecordsError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = int(error_code)

    @classmethod
    def corrupt(cls, message: str) -> RecordsError:
        return cls(ErrorCode.CORRUPT_MESSAGE, message)
