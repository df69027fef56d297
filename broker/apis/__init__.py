"""One module per served API key; ALL_APIS is what the dispatcher registers (and ApiVersions lists)."""

from broker.apis import (
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

ALL_APIS = [produce, fetch, list_offsets, metadata, leader_and_isr, stop_replica, update_metadata,
            controlled_shutdown, api_versions, create_topics, delete_topics, create_partitions]
