"""The controller's side of a failed log directory (Kafka's LogDirEventNotificationHandler and
KafkaController.onBrokerLogDirFailure).

A broker whose log directory fails writes `/log_dir_event_notification/log_dir_event_<seq>`
(`{"version":1,"broker":id,"event":1}`). The controller reads every notification, deletes
it, and takes that broker's replicas offline: a partition it leads gets a new leader from the
rest of its ISR (or none, Kafka's NoLeader, when no other replica is in sync), and it leaves
the ISR of every partition it follows. Until that broker registers again (a restart, after
the disk is fixed), it is never chosen as a leader nor counted in an ISR.

Kafka asks the broker (a LeaderAndIsr round) which of its replicas sit in failed directories;
a minibroker has one log directory, so a failed directory means all of its replicas.
"""

from __future__ import annotations

import structlog

from broker.zk import layout as L
from broker.zk.client import NoNodeError, ZkClient

log = structlog.get_logger()

LOG_DIR_FAILURE_EVENT = 1


async def take_notifications(zk: ZkClient, children: list[str]) -> list[int]:
    """The brokers named by log-dir failure notifications `children`, each notification deleted once read."""
    brokers: set[int] = set()
    for child in sorted(children):
        path = f"{L.LOG_DIR_EVENT}/{child}"
        try:
            data, _ = await zk.get(path)
            body = L.loads(data)
            if int(body.get("event", LOG_DIR_FAILURE_EVENT)) == LOG_DIR_FAILURE_EVENT:
                brokers.add(int(body["broker"]))
        except NoNodeError:
            continue
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("controller.bad_log_dir_notification", znode=child)
        try:
            await zk.delete(path)
        except NoNodeError:
            pass
    return sorted(brokers)


def no_leader(state: L.PartitionState, epoch: int) -> L.PartitionState:
    """Kafka's removal of the last live leader: leader -1 (NoLeader), the ISR kept as it was, so
    that the replica can lead again once it returns and an unclean election is never implied."""
    return L.PartitionState(-1, state.leader_epoch + 1, epoch, list(state.isr))
