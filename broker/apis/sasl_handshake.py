"""SaslHandshake, versions 0-1: choose the SASL mechanism for this connection.

As Kafka 2.8 (SaslServerAuthenticator.handleHandshakeRequest, KafkaApis.handleSaslHandshakeRequest):
on a SASL listener before authentication, NONE with the listener's enabled mechanisms, or
UNSUPPORTED_SASL_MECHANISM (33) with them, answered after `connection.failed.authentication.delay.ms`
and the connection then closed. After authentication it starts KIP-368 re-authentication when
the session has a lifetime (else ILLEGAL_SASL_STATE, connection kept). On a listener that is not
SASL: ILLEGAL_SASL_STATE (34), as KafkaApis answers it.

Departure: the v0 exchange (after a v0 handshake Kafka reads bare SASL tokens without a Kafka
request header, the pre-1.0 form) is not served: a v0 handshake on a SASL listener is answered
ILLEGAL_SASL_STATE with the enabled mechanisms, after the failure delay, and the connection is
closed (ApiVersions still lists 0-1: the registry advertises minimum 0 for every API).
kcat/librdkafka, confluent-kafka, kafka-python, aiokafka and KafkaJS all use v1 with
SaslAuthenticate.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import sasl_handshake as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    sasl = ctx.services.sasl
    session = sasl.session(ctx.conn)
    if session is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    result = session.handshake(request["mechanism"] or "", ctx.api_version)
    if result.failed:
        reason = {ErrorCode.UNSUPPORTED_SASL_MECHANISM: f"Unsupported SASL mechanism {request['mechanism']}",
                  ErrorCode.ILLEGAL_SASL_STATE: f"SaslHandshake v{ctx.api_version} refused"}.get(result.error, "")
        await asyncio.sleep(sasl.failed(ctx.conn, session, reason))
    return {"error_code": result.error, "mechanisms": result.mechanisms}


register(messages, handle)
