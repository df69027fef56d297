"""ApiVersions, versions 0-3.

Built from protocol.registry, the one table of served versions. v3 responses carry
no tagged fields (no SupportedFeatures): Debian's kcat (librdkafka 2.0.2) fails on a
tagged-field section longer than one byte. An unsupported version is answered by the
dispatcher with a v0 body and UNSUPPORTED_VERSION, keeping the connection open.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol import registry
from protocol.messages import api_versions as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    return {"error_code": 0, "api_keys": registry.api_versions_entries(), "throttle_time_ms": 0}


register(messages, handle)
