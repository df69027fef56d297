"""DescribeCluster (key 60), version 0: request and response fields, as in Kafka 2.8.

Declared from Kafka 2.8.2's DescribeClusterRequest.json and DescribeClusterResponse.json (every field of every
version, tagged fields included). Field names are Kafka's, in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.declare import F

API_KEY = ApiKey.DESCRIBE_CLUSTER
NAME = 'DescribeCluster'
VERSIONS = (0, 0)
FLEXIBLE_REQUEST_FROM = 0
FLEXIBLE_RESPONSE_FROM = 0

REQUEST = (
    F('include_cluster_authorized_operations', 'bool', (0, 0)),
)

RESPONSE = (
    F('throttle_time_ms', 'int32', (0, 0)),
    F('error_code', 'int16', (0, 0)),
    F('error_message', 'string', (0, 0), nullable=(0, 0)),
    F('cluster_id', 'string', (0, 0)),
    F('controller_id', 'int32', (0, 0), default=-1),
    F('brokers', '[]struct', (0, 0), fields=(
        F('broker_id', 'int32', (0, 0)),
        F('host', 'string', (0, 0)),
        F('port', 'int32', (0, 0)),
        F('rack', 'string', (0, 0), nullable=(0, 0)),
    )),
    F('cluster_authorized_operations', 'int32', (0, 0), default=-2147483648),
)
