"""The group coordinator on the event loop: GroupMachine's rules with real timers and the real store.

`GroupCoordinator` is what request handlers call (through `BrokerServices.group_coordinator`)
and what the `__consumer_offsets` store tells about partition ownership (it is the
`GroupLoadListener`). It adds only the asyncio around broker/group/machine.py:

- the purgatories' timers are `loop.call_later` handles by key (`LoopTimers`);
- a write the machine asks for is one task awaiting `GroupStore.write`, started in the order the
  machine asked (the store appends in call order, so the log holds commits in that order);
- a JoinGroup or SyncGroup the machine holds is a future, answered when the machine calls back.

Until a store is bound (`bind_store`) this broker owns no `__consumer_offsets` partition and
every group answers NOT_COORDINATOR, as a Kafka broker leading none of them does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

import structlog

from broker.config import BrokerConfig
from broker.group.machine import FetchedOffset, GroupConfig, GroupMachine, LeaveMember
from broker.group.membership import JoinResult, Protocols, SyncResult
from broker.group.store import CommittedOffset, GroupRecord, GroupStore, TopicPartition, _Keep
from protocol.errors import ErrorCode

log = structlog.get_logger()

NO_PARTITION = -1
T = TypeVar('T')


class LoopTimers:
    """Keyed one-shot timers on the running event loop (the machine's `Timers`)."""

    def __init__(self) -> None:
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def schedule(self, key: Hashable, delay_ms: int, action: Callable[[], None]) -> None:
        self.cancel(key)

        def fire() -> None:
            self._handles.pop(key, None)
            action()

        self._handles[key] = asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, fire)

    def cancel(self, key: Hashable) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def __len__(self) -> int:
        return len(self._handles)


def group_config(config: BrokerConfig) -> GroupConfig:
    """The coordinator's keys from server.properties (Kafka's names and defaults, broker/config.py)."""
    return GroupConfig(
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        max_size=config.group_max_size,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        offsets_retention_ms=config.offsets_retention_minutes * 60 * 1000,
        offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms)


def wall_clock_ms() -> int:
    """Kafka's time.milliseconds(): commit and state timestamps are stored and compared in wall time."""
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, broker_id: int, config: GroupConfig, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.broker_id = broker_id
        self.timers = LoopTimers()
        self._store: GroupStore | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self.machine = GroupMachine(broker_id, config, now_ms, self.timers, self._write, self._partition_for)

    # ---- lifecycle --------------------------------------------------------------------------

    def bind_store(self, store: GroupStore) -> None:
        self._store = store

    def _partition_for(self, group_id: str) -> int:
        return NO_PARTITION if self._store is None else self._store.partition_for(group_id)

    def start(self) -> None:
        self.machine.startup()

    async def stop(self) -> None:
        self.machine.shutdown()
        self.timers.cancel_all()
        if self._writes:
            await asyncio.wait(list(self._writes), timeout=5)

    # ---- GroupLoadListener ------------------------------------------------------------------

    def partition_loading(self, partition: int) -> None:
        self.machine.partition_loading(partition)

    def partition_loaded(self, partition: int, groups: Mapping[str, GroupRecord],
                         offsets: Mapping[str, Mapping[TopicPartition, CommittedOffset]]) -> None:
        self.machine.partition_loaded(partition, groups, offsets)

    def partition_unloaded(self, partition: int) -> None:
        self.machine.partition_unloaded(partition)

    # ---- the store ----------------------------------------------------------------------------

    def _write(self, group_id: str, group: GroupRecord | None | _Keep,
               offsets: Mapping[TopicPartition, CommittedOffset | None], callback: Callable[[int], None]) -> None:
        store = self._store
        if store is None:
            callback(ErrorCode.NOT_LEADER_FOR_PARTITION)
            return
        task = asyncio.ensure_future(self._run_write(store, group_id, group, dict(offsets), callback))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _run_write(self, store: GroupStore, group_id: str, group: GroupRecord | None | _Keep,
                         offsets: dict[TopicPartition, CommittedOffset | None],
                         callback: Callable[[int], None]) -> None:
        try:
            code = await store.write(group_id, group, offsets)
        except Exception as e:  # the contract says it never raises; a bug there must not wedge a group
            log.error('group.store_write_raised', broker_id=self.broker_id, group=group_id, error=repr(e))
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        callback(code)

    # ---- the APIs ----------------------------------------------------------------------------

    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                         require_known_member_id: bool, client_id: str, client_host: str, rebalance_timeout_ms: int,
                         session_timeout_ms: int, protocol_type: str, protocols: Protocols) -> JoinResult:
        answer: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        self.machine.handle_join_group(group_id, member_id, group_instance_id, require_known_member_id, client_id,
                                       client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                       protocols, _settle(answer))
        return await answer

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                         protocol_name: str | None, group_instance_id: str | None,
                         assignment: Mapping[str, bytes]) -> SyncResult:
        answer: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self.machine.handle_sync_group(group_id, generation_id, member_id, protocol_type, protocol_name,
                                       group_instance_id, assignment, _settle(answer))
        return await answer

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        return self.machine.handle_heartbeat(group_id, member_id, group_instance_id, generation_id)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]
                    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """`members`: (member id, group instance id); answered with each one's error."""
        error, results = self.machine.handle_leave_group(group_id, [LeaveMember(m, i) for m, i in members])
        return error, [(m.member_id, m.group_instance_id, code) for m, code in results]

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: Mapping[TopicPartition, tuple[int, int, str | None, int]],
                             retention_time_ms: int = -1) -> dict[TopicPartition, int]:
        """`offsets`: (offset, leader epoch or -1, metadata, commit timestamp or -1) by partition.

        KafkaApis' rules: no commit timestamp (all but v1) is now; a retention time (v2-4) other
        than -1 sets the offset's expire timestamp to now + retention; null metadata is "".
        """
        if not offsets:
            return {}
        now = self.machine.now_ms()
        expire = None if retention_time_ms == -1 else now + retention_time_ms
        values = {tp: CommittedOffset(offset, epoch, metadata or '', now if stamp == -1 else stamp, expire)
                  for tp, (offset, epoch, metadata, stamp) in offsets.items()}
        answer: asyncio.Future[dict[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        self.machine.handle_commit_offsets(group_id, member_id, group_instance_id, generation_id, values,
                                           _settle(answer))
        return await answer

    def fetch_offsets(self, group_id: str, require_stable: bool, partitions: list[TopicPartition] | None
                      ) -> tuple[int, dict[TopicPartition, FetchedOffset]]:
        return self.machine.handle_fetch_offsets(group_id, require_stable, partitions)

    def list_groups(self, states: set[str]) -> tuple[int, list[tuple[str, str, str]]]:
        return self.machine.handle_list_groups(states)

    def describe_group(self, group_id: str) -> tuple[int, dict[str, object]]:
        return self.machine.handle_describe_group(group_id)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        answer: asyncio.Future[dict[str, int]] = asyncio.get_running_loop().create_future()
        self.machine.handle_delete_groups(group_ids, _settle(answer))
        return await answer

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[int, dict[TopicPartition, int]]:
        answer: asyncio.Future[tuple[int, dict[TopicPartition, int]]] = asyncio.get_running_loop().create_future()
        self.machine.handle_delete_offsets(group_id, partitions, lambda error, parts: _settle(answer)((error, parts)))
        return await answer

    def metadata_fits(self, metadata: str) -> bool:
        return self.machine.metadata_fits(metadata)


def _settle(future: asyncio.Future[T]) -> Callable[[T], None]:
    """A callback answering `future` once; later calls (a client gone, a fenced duplicate) are dropped."""

    def answer(value: T) -> None:
        if not future.done():
            future.set_result(value)

    return answer
