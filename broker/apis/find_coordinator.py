"""FindCoordinator, versions 0-3 (flexible from 3), as Kafka 2.8's handleFindCoordinatorRequest.

Key type GROUP (v0's only one): the coordinator of a group is the leader of its
`__consumer_offsets` partition (`partitionFor`, the GroupStore's). While the topic does not
exist it is created (broker.apis.internal_topics; with any `auto.create.topics.enable`, as Kafka
does) and the answer is COORDINATOR_NOT_AVAILABLE; so it is while the partition has no live
leader, or the leader no endpoint on the listener the client connected to. The client asks
again. A found coordinator is answered with error_message "NONE", as Kafka 2.8 does (it sends
Errors.message() whatever the error).

Key type TRANSACTION: there is no transaction coordinator (transactions are not served; see
InitProducerId). Departure: Kafka with no coordinator available would answer
COORDINATOR_NOT_AVAILABLE, which a transactional producer retries until its own timeout
(librdkafka's init_transactions waited out its whole 60 s in
test_idempotent_cluster.py::test_transactional_producer_gets_a_fatal_error_at_once). This broker
answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Kafka 2.8's answer to a transactional id its
client may not describe, with an error_message saying why: every client treats it as fatal and
reports it by name at once, as InitProducerId already answers a transactional id here.
Any other key type is INVALID_REQUEST (Kafka's CoordinatorType.forId).
No authorizer: GROUP_AUTHORIZATION_FAILED is never answered.
"""

from __future__ import annotations

from typing import Any

from broker.apis.internal_topics import create_offsets_topic
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import find_coordinator as messages
from protocol.topic import GROUP_METADATA_TOPIC_NAME

# Kafka's Errors.message() of the codes answered here.
_MESSAGES = {
    ErrorCode.NONE: "NONE",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client "
                               "library or the message was sent to an incompatible broker. See the broker logs "
                               "for more details.",
}
NO_TRANSACTION_COORDINATOR = "Transactions are not served: this broker has no transaction coordinator."


def _answer(code: ErrorCode, node: tuple[int, str, int] = (-1, "", -1), message: str | None = None) -> dict[str, Any]:
    node_id, host, port = node
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message or _MESSAGES[code],
            "node_id": node_id, "host": host, "port": port}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    key_type = request.get("key_type", messages.KEY_TYPE_GROUP)
    if key_type == messages.KEY_TYPE_TRANSACTION:
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, message=NO_TRANSACTION_COORDINATOR)
    if key_type != messages.KEY_TYPE_GROUP:
        return _answer(ErrorCode.INVALID_REQUEST, message=f"Unknown coordinator type received: {key_type}")
    services = ctx.services
    md = services.metadata
    parts = md.topics.get(GROUP_METADATA_TOPIC_NAME)
    if not parts:
        await create_offsets_topic(services)
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    info = parts.get(services.group_store.partition_for(request["key"]))
    broker = md.brokers.get(info.leader) if info is not None and info.leader >= 0 else None
    if broker is None:
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    endpoint = broker.endpoint(ctx.conn.listener_name)
    if endpoint is None or not endpoint.host:
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _answer(ErrorCode.NONE, (broker.broker_id, endpoint.host, endpoint.port))


register(messages, handle)
