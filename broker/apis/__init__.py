"""One module per served API key; ALL_APIS is what the dispatcher registers (and ApiVersions lists)."""

from broker.apis import (
    api_versions,
    create_partitions,
    create_topics,
    delete_topics,
    fetch,
    list_offsets,
    metadata,
    produce,
)

ALL_APIS = [produce, fetch, list_offsets, metadata, api_versions, create_topics, delete_topics,
            create_partitions]
