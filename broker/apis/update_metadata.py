"""UpdateMetadata, versions 0-2: the controller refreshes this broker's metadata cache."""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import update_metadata as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    if request["controller_epoch"] < services.metadata.controller_epoch:
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH}
    services.metadata.update(request)
    services.metadata_changed()
    return {"error_code": 0}


register(messages, handle)
