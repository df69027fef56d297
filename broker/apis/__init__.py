"""One module per served API key; importing each registers it (broker.apis.registry).

ALL_APIS is what is registered, by key: the dispatcher serves it and ApiVersions lists it.
"""

from broker.apis import (  # noqa: F401  (imported to register)
    alter_configs,
    api_versions,
    controlled_shutdown,
    create_partitions,
    create_topics,
    delete_topics,
    describe_cluster,
    describe_configs,
    fetch,
    find_coordinator,
    incremental_alter_configs,
    init_producer_id,
    leader_and_isr,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
    stop_replica,
    update_metadata,
)
from broker.apis.registry import registered

ALL_APIS = registered()
