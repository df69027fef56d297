"""One module per served API key; importing each registers it (broker.apis.registry).

ALL_APIS is what is registered, by key: the dispatcher serves it and ApiVersions lists it.
"""

from broker.apis import (  # noqa: F401  (imported to register)
    alter_client_quotas,
    alter_configs,
    alter_user_scram_credentials,
    api_versions,
    controlled_shutdown,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_user_scram_credentials,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    stop_replica,
    sync_group,
    update_metadata,
)
from broker.apis.registry import registered

ALL_APIS = registered()
