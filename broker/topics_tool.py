"""`minibroker topics`: CreateTopics, CreatePartitions, DeleteTopics and Metadata on the wire."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fetcher.connection import KafkaConnection
from protocol.errors import ErrorCode

METADATA, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 3, 19, 20, 37


def _fail(msg: str) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return 1


def _report(name: str, code: int, message: str | None, throttle_ms: int) -> bool:
    if code == 0:
        return True
    err = ErrorCode(code)
    detail = f" ({message})" if message else ""
    extra = f", throttle_time_ms={throttle_ms}" if err == ErrorCode.THROTTLING_QUOTA_EXCEEDED else ""
    print(f"Error for topic {name}: {err.name}{detail}{extra}", file=sys.stderr)
    return False


async def run(args: argparse.Namespace) -> int:
    conn = None
    errors = []
    # Like Kafka's tools: any reachable server of the bootstrap list will do.
    for server in args.bootstrap_server.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            conn = await KafkaConnection.open(host or "127.0.0.1", int(port), timeout=args.timeout)
            break
        except (OSError, TimeoutError, ValueError) as e:
            errors.append(f"{server}: {e}")
    if conn is None:
        return _fail(f"cannot connect to {args.bootstrap_server}: {'; '.join(errors)}")
    async with conn:
        if args.list or args.describe:
            topics = None if (args.list or not args.topic) else [{"name": args.topic}]
            md: dict[str, Any] = await conn.request(METADATA, 1, {"topics": topics}, args.timeout)
            for t in sorted(md["topics"], key=lambda t: t["name"]):
                if args.list:
                    print(t["name"])
                    continue
                if t["error_code"]:
                    print(f"Topic: {t['name']}\tError: {ErrorCode(t['error_code']).name}")
                    continue
                parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
                rf = len(parts[0]["replica_nodes"]) if parts else 0
                print(f"Topic: {t['name']}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}")
                for p in parts:
                    print(f"\tTopic: {t['name']}\tPartition: {p['partition_index']}\tLeader: {p['leader_id']}"
                          f"\tReplicas: {','.join(map(str, p['replica_nodes']))}"
                          f"\tIsr: {','.join(map(str, p['isr_nodes']))}")
            return 0
        if not args.topic:
            return _fail("--topic is required")
        if args.create:
            configs = []
            for item in args.config:
                k, sep, v = item.partition("=")
                if not sep:
                    return _fail(f"--config {item!r} is not key=value")
                configs.append({"name": k, "value": v})
            body = {"topics": [{"name": args.topic, "num_partitions": args.partitions or -1,
                                "replication_factor": args.replication_factor or -1,
                                "assignments": [], "configs": configs}],
                    "timeout_ms": int(args.timeout * 1000)}
            resp = await conn.request(CREATE_TOPICS, 6, body, args.timeout)
            r = resp["topics"][0]
            if not _report(r["name"], r["error_code"], r.get("error_message"), resp["throttle_time_ms"]):
                return 1
            print(f"Created topic {args.topic}.")
            return 0
        if args.alter:
            if not args.partitions:
                return _fail("--alter needs --partitions")
            body = {"topics": [{"name": args.topic, "count": args.partitions, "assignments": None}],
                    "timeout_ms": int(args.timeout * 1000), "validate_only": False}
            resp = await conn.request(CREATE_PARTITIONS, 3, body, args.timeout)
            r = resp["results"][0]
            if not _report(r["name"], r["error_code"], r.get("error_message"), resp["throttle_time_ms"]):
                return 1
            print(f"Topic {args.topic} now has {args.partitions} partitions.")
            return 0
        resp = await conn.request(DELETE_TOPICS, 5, {"topic_names": [args.topic],
                                                     "timeout_ms": int(args.timeout * 1000)}, args.timeout)
        r = resp["responses"][0]
        if not _report(r["name"], r["error_code"], r.get("error_message"), resp["throttle_time_ms"]):
            return 1
        print(f"Topic {args.topic} is marked for deletion.")
        return 0
