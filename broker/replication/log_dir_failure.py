"""A failed log directory taken offline: Kafka's LogDirFailureChannel and the ZooKeeper half of
ReplicaManager.handleLogDirFailure.

Any I/O error on a log directory (an append, roll, index write, flush, read, truncation, the
high-watermark checkpoint, the creation of a new partition's log) fails the whole directory,
once: `LogDirFailureChannel.fail` logs one `log_dir.failed` event and queues the directory.
The replica manager marks the directory's partitions offline at once (Produce, Fetch and
ListOffsets answer KAFKA_STORAGE_ERROR from the next request on) and its listeners stop the
replica fetchers of those partitions; then `notify_controller` writes Kafka's
`/log_dir_event_notification/log_dir_event_<seq>` (`{"version":1,"broker":id,"event":1}`) so
the controller moves leadership away and takes this broker out of the ISRs.

Departure from Kafka 2.8: Kafka halts the broker once every log directory is offline. This
broker has one log directory and keeps running without it: it answers metadata requests and
KAFKA_STORAGE_ERROR for its partitions, so clients get a clear error instead of a refused
connection, and the controller elects other leaders from the notification instead of from
the broker's session expiry. A restart (after the disk is fixed) brings the directory back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from broker.zk import layout as L
from broker.zk.client import NoNodeError, ZkClient

log = structlog.get_logger()

# Kafka's LogDirEventNotificationHandler.LogDirFailureEvent.
LOG_DIR_FAILURE_EVENT = 1


class LogDirFailureChannel:
    """Which log directories are offline, and the queue of those not yet reported to the controller."""

    def __init__(self) -> None:
        self.offline: dict[Path, str] = {}
        self._queue: asyncio.Queue[Path] = asyncio.Queue()
        self._queued: set[Path] = set()

    def is_offline(self, directory: Path) -> bool:
        return directory in self.offline

    def fail(self, directory: Path, operation: str, error: BaseException) -> bool:
        """Mark `directory` offline; True the first time (then it is logged and queued)."""
        if directory in self.offline:
            return False
        self.offline[directory] = f"{operation}: {error}"
        log.error("log_dir.failed", log_dir=str(directory), operation=operation, error=str(error),
                  action="serving no partition of this directory until restart; KAFKA_STORAGE_ERROR to clients")
        self.remind(directory)
        return True

    def remind(self, directory: Path) -> None:
        """Report an offline directory to the controller again: one that does not know of it (a new
        controller after a failover) has just asked this broker to lead one of its partitions."""
        if directory in self.offline and directory not in self._queued:
            self._queued.add(directory)
            self._queue.put_nowait(directory)

    async def next_failed(self) -> Path:
        directory = await self._queue.get()
        self._queued.discard(directory)
        return directory


def event_body(broker_id: int) -> bytes:
    return L.dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


async def forget_earlier_failures(zk: ZkClient, broker_id: int) -> None:
    """Delete this broker's notifications left by an earlier run (killed before the controller read
    them): this run opens its directory anew, and a directory still broken fails again and says so.
    Called before registering, so no controller can take a stale one for this run's."""
    try:
        children = await zk.get_children(L.LOG_DIR_EVENT)
    except NoNodeError:
        return
    for child in children:
        path = f"{L.LOG_DIR_EVENT}/{child}"
        try:
            data, _ = await zk.get(path)
            if int(L.loads(data).get("broker", -1)) != broker_id:
                continue
            await zk.delete(path)
            log.info("log_dir.stale_notification_deleted", znode=child)
        except NoNodeError:
            continue
        except (ValueError, TypeError, AttributeError):
            continue  # not ours to judge: the controller deletes what it cannot read


async def notify_controller(channel: LogDirFailureChannel, zk: ZkClient, broker_id: int) -> None:
    """Forever: one log-dir event notification per failed directory, retried until written."""
    while True:
        directory = await channel.next_failed()
        while True:
            try:
                await zk.create(f"{L.LOG_DIR_EVENT}/log_dir_event_", event_body(broker_id), sequential=True,
                                make_parents=True)
                log.info("log_dir.controller_notified", log_dir=str(directory))
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # ZooKeeper away: the controller must still hear of it
                log.warning("log_dir.notification_failed", log_dir=str(directory), error=type(e).__name__)
                await asyncio.sleep(1)
