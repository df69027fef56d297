"""SaslAuthenticate, versions 0-2 (flexible from 2; v1+ carries session_lifetime_ms, KIP-368).

As Kafka 2.8 (SaslServerAuthenticator.handleSaslToken): each request carries one token of the
mechanism chosen by SaslHandshake and is answered with the server's token. On success the
connection's principal becomes `User:<name>`, and with `connections.max.reauth.ms` > 0 a v1+
client is told its session lifetime. A failure is SASL_AUTHENTICATION_FAILED (58) with Kafka's
message (PLAIN's own, e.g. "Authentication failed: Invalid username or password"; SCRAM's generic
"Authentication failed during authentication due to invalid credentials with SASL mechanism
SCRAM-SHA-512"), answered after `connection.failed.authentication.delay.ms`, and the connection
is then closed. After authentication (not re-authenticating), and on a listener that is not
SASL: ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication"
(KafkaApis), connection kept.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import sasl_authenticate as messages

_AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    sasl = ctx.services.sasl
    session = sasl.session(ctx.conn)
    if session is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": _AFTER_AUTHENTICATION,
                "auth_bytes": b"", "session_lifetime_ms": 0}
    result = session.authenticate(bytes(request["auth_bytes"] or b""), ctx.api_version)
    if result.failed:
        await asyncio.sleep(sasl.failed(ctx.conn, session, result.message or ""))
    elif result.principal is not None:
        ctx.conn.principal = result.principal
        sasl.succeeded(ctx.conn, session)
    return {"error_code": result.error, "error_message": result.message, "auth_bytes": result.token,
            "session_lifetime_ms": result.session_lifetime_ms}


register(messages, handle)
