"""CreateTopics, versions 0-7.

Each topic is validated on its own and answered with Kafka's code (INVALID_TOPIC_EXCEPTION,
TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG,
INVALID_REQUEST for a name given twice); the others still go through. A partition count whose
assignment ZooKeeper could not store in one znode is INVALID_PARTITIONS at once, before any
assignment is built (broker.apis.assignment_bounds), validate_only or not. num_partitions or
replication_factor -1 (v4+) take the broker defaults. validate_only (v1+) writes nothing
and is not counted. KIP-599: a valid topic then takes its partition count from the client's
mutation quota (broker.apis.mutation_quota; strict from v6, permissive before).
A topic with a partition that only this broker hosts, while this broker's log directory is
offline, is answered KAFKA_STORAGE_ERROR (naming the directory) instead of waiting for a leader
that cannot come.
From v5 a created (or validated) topic is answered with its partition count, replication factor
and every topic config with its value and source (Kafka's createTopicConfigEntry, no synonyms);
v7's topic_id is the zero UUID (this broker, like a ZooKeeper Kafka before topic ids, has none).
Authorization: Create on the cluster, else Create on each topic (TOPIC_AUTHORIZATION_FAILED); the
created topic's configs (v5+) only with DescribeConfigs on it, else topic_config_error_code
TOPIC_AUTHORIZATION_FAILED and no configs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.apis import authorization
from broker.apis.admin import AdminError, TopicSpec
from broker.apis.mutation_quota import MutationQuota
from broker.apis.registry import register
from broker.config_catalog import topic_entries
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import create_topics as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    admin = ctx.services.admin
    validate_only = bool(request.get("validate_only", False))
    quota = MutationQuota(ctx, strict=ctx.api_version >= 6)
    counts = Counter(t["name"] for t in request["topics"])
    results = []
    created: list[tuple[str, int]] = []
    only_here: set[str] = set()  # topics with a partition whose one replica is this broker
    me = ctx.services.broker_id
    may_create_any = authorization.allowed(ctx, count=False)
    for t in request["topics"]:
        name = t["name"]
        res: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None,
                               "num_partitions": -1, "replication_factor": -1, "configs": None}
        results.append(res)
        if counts[name] <= 1 and not may_create_any and (refused := authorization.error(ctx, name, which=1)):
            res["error_code"] = refused
            res["error_message"] = "Authorization failed."
            continue
        if counts[name] > 1:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"Create topics request from client contains multiple entries for topic {name}"
            continue
        nulls = [c["name"] for c in t.get("configs") or [] if c["value"] is None]
        if nulls:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"Null value not supported for topic configs : {','.join(nulls)}"
            continue
        assignment = {a["partition_index"]: list(a["broker_ids"]) for a in t.get("assignments") or []}
        configs = {c["name"]: c["value"] for c in t.get("configs") or []}
        spec = TopicSpec(name, t["num_partitions"], t["replication_factor"], assignment or None, configs)
        try:
            async with admin.mutations:
                plan = await admin.validate_new_topic(spec)
                if not validate_only:
                    if not quota.admit(len(plan), res):
                        continue
                    plan = await admin.create_topic(spec, plan)
                    created.append((name, len(plan)))
                    if any(list(r) == [me] for r in plan.values()):
                        only_here.add(name)
                res["num_partitions"] = len(plan)
                res["replication_factor"] = len(next(iter(plan.values())))
                del plan
            if authorization.allowed(ctx, name, which=2, count=False):
                res["configs"] = [{k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                                  for e in topic_entries(configs, ctx.services.config, include_synonyms=False)]
            else:  # KafkaApis: the topic is created, its configs are not shown
                res["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        except AdminError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
    # Like Kafka's DelayedCreateTopics: answer once every new partition has a leader in
    # this broker's metadata, so a client's next Metadata request finds them.
    rm = ctx.services.replicas

    def storage_failed(name: str) -> bool:
        return name in only_here and rm.log_dir_offline

    timeout = max(request.get("timeout_ms", 0), 0) / 1000
    if created and timeout > 0:
        ready = await ctx.services.metadata_updated.wait_until(
            lambda: all(storage_failed(n) or admin.has_leaders(n, count) for n, count in created), timeout)
        for res in results:
            if not any(res["name"] == n for n, _ in created):
                continue
            if storage_failed(res["name"]):
                res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                res["error_message"] = (f"Log directory {rm.log_dir} of broker {me} is offline "
                                        f"({rm.dir_failures.offline.get(rm.log_dir)}); the topic has no leader.")
            elif not ready and not admin.has_leaders(res["name"], 1):
                res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
    return {"throttle_time_ms": quota.finish(), "topics": results}


register(messages, handle)
