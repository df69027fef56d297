"""Helpers shared by the tests and the benches; the pytest fixtures that use them live in the conftest files.

- `tools`: ROOT and the project's own commands (`minibroker topics`, `configs`, `reassign`) as subprocesses
- `ports`: free TCP ports outside the kernel's ephemeral range
- `brokers`: `BrokerProcess`, one real `minibroker serve` process
- `cluster`: `Cluster`, three brokers on one ZooKeeper, and the ZooKeeper-side view of it
- `zookeeper`: a connected `ZkClient` for a test, and `TcpProxy` to cut a client off its server
- `waiting`: `wait_for`, polling until a check holds
- `wire`: the project's own client on the wire: connect, produce, fetch
- `topics`: one `create_topic` (partitions, replication factor, assignment, configs), leaders, topic names
- `traffic`: confluent-kafka producers and consumers that generate and read load
- `replication`: KIP-73 throttle settings and catch-up sampling, log sizes on disk
- `metrics`: reading a broker's Prometheus endpoint
- `recording`: `RecordingProxy`, a proxy that keeps the request frames real clients send (the fuzz seeds)

Import the module you need (`from tests.support.brokers import BrokerProcess`); never a helper from a test module.
"""
