"""`minibroker topics`: CreateTopics, CreatePartitions, DeleteTopics and Metadata on the wire.

A topic refused by the broker's mutation quota (THROTTLING_QUOTA_EXCEEDED, KIP-599) is
reported with its throttle time and the command exits 1, as kafka-topics does.
`--retry-on-quota-violation` waits out the throttle and asks again until `--timeout`.
Every error the broker answers (KAFKA_STORAGE_ERROR for a topic whose only replica sits in an
offline log directory, REQUEST_TIMED_OUT, ...) is printed with its message and exits 1; so does a
connection lost or a broker that does not answer, never with a traceback.

`--describe` prints kafka-topics' lines; its `Configs:` field holds the topic's cleanup policy
(always, its effective value) and every override the topic sets (DescribeConfigs v1, the
DYNAMIC_TOPIC_CONFIG entries: retention.ms, retention.bytes, segment.*, ...), as kafka-topics
lists the overrides.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

from broker.tools.tool_support import ToolError, command_config
from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode


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


# The broker may use all of `timeout_ms` before it answers; the client waits a little longer.
ANSWER_MARGIN_S = 10.0


async def _mutate(conn: KafkaConnection, args: argparse.Namespace, key: int, version: int, body: dict[str, Any],
                  result: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    deadline = time.monotonic() + args.timeout
    while True:
        resp = await conn.request(key, version, body, args.timeout + ANSWER_MARGIN_S)
        r = result(resp)
        throttle_ms = resp.get("throttle_time_ms", 0)
        if (r["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED and args.retry_on_quota_violation
                and time.monotonic() + throttle_ms / 1000 < deadline):
            print(f"Throttled by the controller mutation quota; retrying in {throttle_ms} ms.", file=sys.stderr)
            await asyncio.sleep(max(throttle_ms, 1) / 1000)
            continue
        return _report(r["name"], r["error_code"], r.get("error_message"), throttle_ms)


_DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigsResponse.ConfigSource
_TOPIC_RESOURCE = 2


async def _topic_configs(conn: KafkaConnection, topic: str, timeout: float) -> str:
    """`cleanup.policy=...` then the topic's overrides, `k=v` comma-separated (kafka-topics' form)."""
    body = {"resources": [{"resource_type": _TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False}
    resp: dict[str, Any] = await conn.request(ApiKey.DESCRIBE_CONFIGS, 1, body, timeout)
    result = resp["results"][0]
    if result["error_code"]:
        return f"(unavailable: {ErrorCode(result['error_code']).name})"
    entries = {c["name"]: c for c in result["configs"]}
    shown = [f"cleanup.policy={entries['cleanup.policy']['value']}"] if "cleanup.policy" in entries else []
    shown += [f"{name}={c['value']}" for name, c in sorted(entries.items())
              if c["config_source"] == _DYNAMIC_TOPIC_CONFIG and name != "cleanup.policy"]
    return ",".join(shown)


async def run(args: argparse.Namespace) -> int:
    try:
        return await _run(args)
    except (ConnectionError, TimeoutError, OSError, asyncio.IncompleteReadError) as e:
        return _fail(f"no answer from {args.bootstrap_server}: {type(e).__name__}: {e}")


async def _run(args: argparse.Namespace) -> int:
    try:
        security = command_config(getattr(args, "command_config", None))
    except ToolError as e:
        return _fail(str(e))
    conn = None
    errors = []
    # Like Kafka's tools: any reachable server of the bootstrap list will do.
    for server in args.bootstrap_server.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            conn = await KafkaConnection.open(host or "127.0.0.1", int(port), timeout=args.timeout,
                                              security=security)
            break
        except (OSError, TimeoutError, ValueError) as e:
            errors.append(f"{server}: {e}")
    if conn is None:
        return _fail(f"cannot connect to {args.bootstrap_server}: {'; '.join(errors)}")
    async with conn:
        if args.list or args.describe:
            topics = None if (args.list or not args.topic) else [{"name": args.topic}]
            md: dict[str, Any] = await conn.request(ApiKey.METADATA, 1, {"topics": topics}, args.timeout)
            for t in sorted(md["topics"], key=lambda t: t["name"]):
                if args.list:
                    print(t["name"])
                    continue
                if t["error_code"]:
                    print(f"Topic: {t['name']}\tError: {ErrorCode(t['error_code']).name}")
                    continue
                parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
                rf = len(parts[0]["replica_nodes"]) if parts else 0
                configs = await _topic_configs(conn, t["name"], args.timeout)
                print(f"Topic: {t['name']}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}"
                      f"\tConfigs: {configs}")
                for p in parts:
                    print(f"\tTopic: {t['name']}\tPartition: {p['partition_index']}\tLeader: {p['leader_id']}"
                          f"\tReplicas: {','.join(map(str, p['replica_nodes']))}"
                          f"\tIsr: {','.join(map(str, p['isr_nodes']))}")
            return 0
        if not args.topic:
            return _fail("--topic is required")
        if args.create:
            create_configs: list[dict[str, str]] = []
            for item in args.config:
                k, sep, v = item.partition("=")
                if not sep:
                    return _fail(f"--config {item!r} is not key=value")
                create_configs.append({"name": k, "value": v})
            body = {"topics": [{"name": args.topic, "num_partitions": args.partitions or -1,
                                "replication_factor": args.replication_factor or -1,
                                "assignments": [], "configs": create_configs}],
                    "timeout_ms": int(args.timeout * 1000)}
            if not await _mutate(conn, args, ApiKey.CREATE_TOPICS, 6, body, lambda resp: resp["topics"][0]):
                return 1
            print(f"Created topic {args.topic}.")
            return 0
        if args.alter:
            if not args.partitions:
                return _fail("--alter needs --partitions")
            body = {"topics": [{"name": args.topic, "count": args.partitions, "assignments": None}],
                    "timeout_ms": int(args.timeout * 1000), "validate_only": False}
            if not await _mutate(conn, args, ApiKey.CREATE_PARTITIONS, 3, body, lambda resp: resp["results"][0]):
                return 1
            print(f"Topic {args.topic} now has {args.partitions} partitions.")
            return 0
        body = {"topic_names": [args.topic], "timeout_ms": int(args.timeout * 1000)}
        if not await _mutate(conn, args, ApiKey.DELETE_TOPICS, 5, body, lambda resp: resp["responses"][0]):
            return 1
        print(f"Topic {args.topic} is marked for deletion.")
        return 0
