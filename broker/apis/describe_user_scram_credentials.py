"""DescribeUserScramCredentials, version 0 (flexible): each user's SCRAM mechanisms and iteration counts (KIP-554).

As Kafka 2.8 (KafkaApis + ZkAdminManager.describeUserScramCredentials), read from ZooKeeper's
`/config/users/<user>`: Describe on the cluster or CLUSTER_AUTHORIZATION_FAILED for the whole
request; no users (null or empty) lists every user with a credential, sorted; a named user
without one gets RESOURCE_NOT_FOUND ("Attempt to describe a user credential that does not
exist: <user>"), an empty name RESOURCE_NOT_FOUND ("Username must not be empty"), a name given
twice DUPLICATE_RESOURCE. Salts and keys never leave the broker: only mechanism and iterations.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.zk import layout as L
from broker.zk.client import NoNodeError
from broker.zk.config_entities import USERS, desanitize, sanitize
from broker.zk.config_writer import read_entity
from broker.zk.scram_credentials import MECHANISM_TYPES, ScramCredential
from protocol.errors import ErrorCode
from protocol.messages import describe_user_scram_credentials as messages


def _result(user: str, error: ErrorCode = ErrorCode.NONE, message: str | None = None,
            infos: list[dict[str, int]] | None = None) -> dict[str, Any]:
    return {"user": user, "error_code": error, "error_message": message, "credential_infos": infos or []}


def _infos(config: dict[str, str]) -> list[dict[str, int]] | None:
    """The user's credentials as (mechanism type, iterations); None when it has none."""
    present = [m for m in MECHANISM_TYPES if m in config]
    if not present:
        return None
    return [{"mechanism": MECHANISM_TYPES[m], "iterations": ScramCredential.from_config(config[m]).iterations}
            for m in present]


async def _describe(ctx: RequestContext, user: str, explicit: bool) -> dict[str, Any] | None:
    zk = ctx.services.config_admin.zk
    config, _ = await read_entity(zk, USERS, sanitize(user))
    try:
        infos = _infos(config)
    except ValueError:
        return _result(user, ErrorCode.UNKNOWN_SERVER_ERROR, "Error processing describe user SCRAM credential configs request")
    if infos is None:
        if not explicit:
            return None
        return _result(user, ErrorCode.RESOURCE_NOT_FOUND,
                       f"Attempt to describe a user credential that does not exist: {user}")
    return _result(user, infos=infos)


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": []}
    error = authorization.error(ctx)
    if error:
        answer["error_code"] = error
        return answer
    names = [u["name"] for u in request["users"] or []]
    results: list[dict[str, Any]] = []
    if not names:
        try:
            users = sorted(desanitize(n) for n in await ctx.services.config_admin.zk.get_children(
                f"{L.CONFIG_ROOT}/{USERS}"))
        except NoNodeError:
            users = []
        for user in users:
            r = await _describe(ctx, user, explicit=False)
            if r is not None:
                results.append(r)
    else:
        counts = Counter(names)
        for user in dict.fromkeys(names):  # each user once, in the order first asked
            if not user:
                results.append(_result(user, ErrorCode.RESOURCE_NOT_FOUND, "Username must not be empty"))
            elif counts[user] > 1:
                results.append(_result(user, ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials "
                                       f"for the same user twice in a single request: {user}"))
            else:
                r = await _describe(ctx, user, explicit=True)
                assert r is not None
                results.append(r)
    answer["results"] = results
    return answer


register(messages, handle)
