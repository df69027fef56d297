"""ApiVersions, versions 0-3 (Kafka 2.8).

Built from protocol.registry, the one table of served versions. v3 responses carry
no tagged fields (no SupportedFeatures): Debian's kcat (librdkafka 2.0.2) fails on a
tagged-field section longer than one byte. An unsupported version is answered by the
dispatcher with a v0 body and UNSUPPORTED_VERSION, keeping the connection open. As Kafka's
ApiVersionsRequest.isValid, a v3 request whose client_software_name or client_software_version
is not `[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?` gets INVALID_REQUEST and no API list.
Responses always use response header v0 (protocol.headers).
"""

from __future__ import annotations

import re
from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol import registry
from protocol.errors import ErrorCode
from protocol.messages import api_versions as messages

_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _valid(request: dict[str, Any], version: int) -> bool:
    if version < 3:
        return True
    return all(_SOFTWARE.fullmatch(request.get(k) or "") for k in ("client_software_name", "client_software_version"))


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    if not _valid(request, ctx.api_version):
        return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [], "throttle_time_ms": 0}
    return {"error_code": 0, "api_keys": registry.api_versions_entries(), "throttle_time_ms": 0}


register(messages, handle)
