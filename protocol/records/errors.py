"""The one error record validation raises; it carries the Kafka error code the partition gets."""

from __future__ import annotations

from protocol.errors import ErrorCode


class RecordsError(Exception):
    """error_code for the partition; record_errors, when validation rejected particular records,
    are (index of the record in its batch, message) as Produce v8+'s record_errors carry them."""

    def __init__(self, error_code: int, message: str,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.error_code = int(error_code)
        self.record_errors = record_errors or []

    @classmethod
    def corrupt(cls, message: str) -> RecordsError:
        return cls(ErrorCode.CORRUPT_MESSAGE, message)
