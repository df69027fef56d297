"""One module per API key, each declaring its request and response fields (see protocol.declare)."""

from __future__ import annotations

from types import ModuleType

from protocol.messages import (
    api_versions,
    controlled_shutdown,
    create_partitions,
    create_topics,
    delete_topics,
    fetch,
    leader_and_isr,
    list_offsets,
    metadata,
    produce,
    stop_replica,
    update_metadata,
)

MODULES: dict[int, ModuleType] = {
    m.API_KEY: m
    for m in (produce, fetch, list_offsets, metadata, leader_and_isr, stop_replica, update_metadata,
              controlled_shutdown, api_versions, create_topics, delete_topics, create_partitions)
}
