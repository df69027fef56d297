"""UpdateMetadata, versions 0-2: the controller refreshes this broker's metadata cache."""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import update_metadata as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    broker = ctx.broker
    if request["controller_epoch"] < broker.metadata.controller_epoch:
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH}
    broker.metadata.update(request)
    broker.metadata_changed()
    return {"error_code": 0}


register(messages, handle)
