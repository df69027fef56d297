"""AlterUserScramCredentials, version 0 (flexible): upsert or delete users' SCRAM credentials (KIP-554).

As Kafka 2.8 (KafkaApis + ZkAdminManager.alterUserScramCredentials): NOT_CONTROLLER unless this
broker is the active controller; Alter on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every
user named. Per user: an empty name is UNACCEPTABLE_CREDENTIAL ("Username must not be empty"), an
unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..16384
UNACCEPTABLE_CREDENTIAL ("Too few iterations" / "Too many iterations"), one (user, mechanism)
twice DUPLICATE_RESOURCE, deleting a credential the user does not have RESOURCE_NOT_FOUND; a
user with any of these is left untouched. The client sends the salt and SaltedPassword; the
broker stores Kafka's `salt,stored_key,server_key,iterations` in `/config/users/<user>` and
writes a change notification (broker.zk.config_writer), which every broker's credential cache
applies.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import structlog

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.zk.config_entities import USERS, InvalidConfig, sanitize
from broker.zk.config_writer import alter_entity, read_entity
from broker.zk.scram_credentials import MAX_ITERATIONS, MECHANISM_NAMES, MIN_ITERATIONS, from_salted_password
from protocol.errors import ErrorCode
from protocol.messages import alter_user_scram_credentials as messages

log = structlog.get_logger()
_EMPTY = "Username must not be empty"


def _result(user: str, error: ErrorCode = ErrorCode.NONE, message: str | None = None) -> dict[str, Any]:
    return {"user": user, "error_code": error, "error_message": message}


def _illegal(upsertions: list[dict[str, Any]], deletions: list[dict[str, Any]]) -> dict[str, tuple[ErrorCode, str]]:
    """The users refused before anything is read: deletions' reasons first, then upsertions' (Kafka's map order)."""
    bad: dict[str, tuple[ErrorCode, str]] = {}
    for d in deletions:
        if not d["name"]:
            bad[d["name"]] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, _EMPTY)
        elif d["mechanism"] not in MECHANISM_NAMES:
            bad[d["name"]] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    for u in upsertions:
        if not u["name"]:
            bad[u["name"]] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, _EMPTY)
        elif u["mechanism"] not in MECHANISM_NAMES:
            bad[u["name"]] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif u["iterations"] > MAX_ITERATIONS:
            bad[u["name"]] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif u["iterations"] < MIN_ITERATIONS:
            bad[u["name"]] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    return bad


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    upsertions: list[dict[str, Any]] = request["upsertions"] or []
    deletions: list[dict[str, Any]] = request["deletions"] or []
    named = list(dict.fromkeys([u["name"] for u in upsertions] + [d["name"] for d in deletions]))
    answer: dict[str, Any] = {"throttle_time_ms": 0, "results": []}
    if not ctx.services.controller.active:
        answer["results"] = [_result(u, ErrorCode.NOT_CONTROLLER) for u in named]
        return answer
    error = authorization.error(ctx)
    if error:
        answer["results"] = [_result(u, error) for u in named]
        return answer
    results: list[dict[str, Any]] = []
    illegal = _illegal(upsertions, deletions)
    results += [_result(user, code, msg) for user, (code, msg) in illegal.items()]
    pairs = [(x["name"], x["mechanism"]) for x in upsertions + deletions if x["name"] not in illegal]
    duplicated = list(dict.fromkeys(user for (user, _), n in Counter(pairs).items() if n > 1))
    results += [_result(user, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
                for user in duplicated]
    candidates = [u for u in dict.fromkeys(user for user, _ in pairs) if u not in duplicated]
    zk = ctx.services.config_admin.zk
    for user in candidates:
        current, _ = await read_entity(zk, USERS, sanitize(user))
        drops = [MECHANISM_NAMES[d["mechanism"]] for d in deletions if d["name"] == user]
        if any(m not in current for m in drops):
            results.append(_result(user, ErrorCode.RESOURCE_NOT_FOUND,
                                   "Attempt to delete a user credential that does not exist"))
            continue
        adds = {MECHANISM_NAMES[u["mechanism"]]: from_salted_password(
                    MECHANISM_NAMES[u["mechanism"]], bytes(u["salted_password"]), bytes(u["salt"]),
                    u["iterations"]).to_config()
                for u in upsertions if u["name"] == user}
        try:
            await alter_entity(zk, USERS, sanitize(user), adds, drops, force=True)
        except InvalidConfig as e:
            results.append(_result(user, ErrorCode.INVALID_REQUEST, e.why))
            continue
        log.info("sasl.credentials_altered", broker_id=ctx.services.broker_id, user=user,
                 upserted=sorted(adds), deleted=sorted(drops), principal=ctx.principal)
        results.append(_result(user))
    answer["results"] = results
    return answer


register(messages, handle)
