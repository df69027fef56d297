"""ZooKeeper: the one client module (`client`, which contains aiozk's pitfalls), Kafka's znode
layout, dynamic config entities and their watcher, and a throwaway server for tests and tools."""
