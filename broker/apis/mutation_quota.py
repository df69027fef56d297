"""One admin request's use of its client's KIP-599 bucket (Kafka's ControllerMutationQuota).

CreateTopics v6+, CreatePartitions v3+ and DeleteTopics v5+ are strict: a topic arriving
while the tokens are below zero is rejected with THROTTLING_QUOTA_EXCEEDED. Older versions
are permissive: every topic is taken and the client is only slowed. Either way the response
carries the throttle, and the connection is not read for that long (as Kafka mutes the
channel), so a client that ignores throttle_time_ms is still paced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.zk.config_entities import quota_user
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.dispatch import RequestContext

QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


class MutationQuota:
    def __init__(self, ctx: RequestContext, strict: bool) -> None:
        self.ctx = ctx
        self.strict = strict
        self.manager = ctx.services.mutation_quotas
        self.user = quota_user(ctx.principal)  # KIP-55: the user levels, as the byte-rate quotas
        self.throttle_ms = 0
        self._paid_at_ms = 0.0  # when the debt seen while recording is paid back

    def admit(self, partitions: int, res: dict[str, object]) -> bool:
        """Take `partitions` for one topic; False (with the error set on `res`) when rejected."""
        now = self.ctx.services.now_ms()
        if self.strict:
            throttle = self.manager.strict(self.ctx.client_id, partitions, now, user=self.user)
            if throttle:
                self._owe(throttle, now)
                res["error_code"] = ErrorCode.THROTTLING_QUOTA_EXCEEDED
                res["error_message"] = QUOTA_EXCEEDED_MESSAGE
                return False
            return True
        self._owe(self.manager.permissive(self.ctx.client_id, partitions, now, user=self.user), now)
        return True

    def _owe(self, throttle_ms: int, now_ms: float) -> None:
        if throttle_ms:
            self._paid_at_ms = max(self._paid_at_ms, now_ms + throttle_ms)

    def finish(self) -> int:
        """The response's throttle_time_ms; mutes the connection for it.

        As in Kafka, the time since the throttle was recorded (e.g. waiting for the new
        partitions' leaders) is deducted: only what is still owed now is paid.
        """
        if self._paid_at_ms:
            self.throttle_ms = max(0, round(self._paid_at_ms - self.ctx.services.now_ms()))
        if self.throttle_ms:
            self.ctx.conn.mute_for(self.throttle_ms / 1000)
        return self.throttle_ms
