"""structlog set-up: one event per line, key=value on a terminal or JSON; every event carries broker_id."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(broker_id: int | None, fmt: str = "console", level: str = "info") -> structlog.typing.FilteringBoundLogger:
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event", "broker_id"])
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    if broker_id is not None:
        structlog.contextvars.bind_contextvars(broker_id=broker_id)
    # The wrapper_class configured above: a filtering bound logger (get_logger is typed Any).
    log: structlog.typing.FilteringBoundLogger = structlog.get_logger()
    return log
