"""Kafka's rules for a legal topic name (`org.apache.kafka.common.internals.Topic.validate`).

The one validator: Metadata, the admin APIs, the controller's requests and the log layer's
directory names all use it, so a name that reaches the filesystem or a znode path is
never `..`, absolute, or slashed.
"""

from __future__ import annotations

import re

from protocol.errors import ErrorCode

LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_LENGTH = 249

# Kafka's internal topics (Topic.GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME): flagged
# is_internal in Metadata, created only with their own settings, refused to ordinary produce.
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})


def is_internal(name: str | None) -> bool:
    """Kafka's Topic.isInternal: by name alone."""
    return name in INTERNAL_TOPICS


def topic_name_error(name: str | None) -> str | None:
    """Kafka's Topic.validate, as a message (None when the name is legal)."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_LENGTH} characters"
    if not LEGAL_TOPIC.fullmatch(name):
        return (f"Topic name \"{name[:MAX_TOPIC_LENGTH]}\" is illegal, it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


def topic_partition_error(topic: str | None, partition: int) -> ErrorCode:
    """NONE for a (topic, partition) that may name a replica; else the code a per-partition answer carries."""
    if topic_name_error(topic) is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if partition < 0:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


__all__ = ["GROUP_METADATA_TOPIC_NAME", "INTERNAL_TOPICS", "LEGAL_TOPIC", "MAX_TOPIC_LENGTH",
           "TRANSACTION_STATE_TOPIC_NAME", "is_internal", "topic_name_error", "topic_partition_error"]
