"""The share-group state persister (KIP-932; Kafka's DefaultStatePersister and
PersisterStateManager): how a share-partition leader (`fetcher`) and the share-group offset APIs
(`service`) reach a share-partition's durable state, wherever its share coordinator runs.

The share coordinator of a share-partition is the leader of its `__share_group_state` partition
(the hash of "group:topicId:partition"), usually not the broker leading the data partition:

- a single broker serves every key itself: the local store is called directly, nothing between;
- in a cluster, the local store when this broker serves the key's state partition, else the
  share coordinator's APIs (InitializeShareGroupState, ReadShareGroupState,
  WriteShareGroupState, DeleteShareGroupState, ReadShareGroupStateSummary) sent to the
  partition's leader over the inter-broker client. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
  COORDINATOR_LOAD_IN_PROGRESS (a leader not known yet, moving, loading, or not answering) are
  retried with a growing backoff, the leader looked up again each time, until `retry_timeout_s`:
  as Kafka's persister finds the coordinator again and retries.

Every call carries what fences it: a read the leader epoch of the data partition (the coordinator
records a newer one, so an older leader's later writes are refused with FENCED_LEADER_EPOCH), a
write the leader and state epochs it read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from kio.schema.delete_share_group_state.v0 import request as delete_req
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0 import request as init_req
from kio.schema.read_share_group_state.v0 import request as read_req
from kio.schema.read_share_group_state_summary.v1 import request as summary_req
from kio.schema.write_share_group_state.v1 import request as write_req

from ..errors import BrokerError
from ..interbroker import InterBrokerClient
from ..leadership import Leadership
from .persisted import UNINITIALIZED, PersistedState
from .state_records import ShareStateKey, StateBatch
from .state_store import NO_EPOCH, STATE_TOPIC, ShareCoordinatorError, ShareStateStore

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress})
RETRY_TIMEOUT_S = 10.0
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.05, 1.0


class SharePersister:
    def __init__(self, store: ShareStateStore, *, retry_timeout_s: float = RETRY_TIMEOUT_S):
        self.store = store
        self.retry_timeout_s = retry_timeout_s
        # Cluster mode (`use_cluster`): who leads which state partition, and the other brokers.
        self.leadership: Leadership | None = None
        self.peers: InterBrokerClient | None = None

    def use_cluster(self, leadership: Leadership, peers: InterBrokerClient) -> None:
        self.leadership, self.peers = leadership, peers

    @property
    def clustered(self) -> bool:
        return self.leadership is not None and self.leadership.clustered

    # ======================================================================= the API
    async def read(self, key: ShareStateKey, leader_epoch: int) -> PersistedState | None:
        """The share-partition's state (None: none yet), read by its leader at `leader_epoch`."""

        async def remote(broker_id: int) -> PersistedState | None:
            request = read_req.ReadShareGroupStateRequest(group_id=key.group, topics=(read_req.ReadStateData(
                topic_id=key.topic_id, partitions=(read_req.PartitionData(partition=key.partition,
                                                                          leader_epoch=leader_epoch),)),))
            result = _partition_result(await self._send(broker_id, request), key)
            if result.start_offset == UNINITIALIZED and not result.state_batches:
                return None
            return PersistedState(result.state_epoch, result.start_offset, tuple(
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in result.state_batches))

        return await self._call(key, lambda: self.store.read(key, leader_epoch), remote)

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> None:
        """The share-partition starts (over) at `start_offset` (its first fetch, AlterShareGroupOffsets)."""

        async def remote(broker_id: int) -> None:
            request = init_req.InitializeShareGroupStateRequest(group_id=key.group, topics=(
                init_req.InitializeStateData(topic_id=key.topic_id, partitions=(init_req.PartitionData(
                    partition=key.partition, state_epoch=state_epoch, start_offset=start_offset),)),))
            _partition_result(await self._send(broker_id, request), key)

        await self._call(key, lambda: self.store.initialize(key, state_epoch, start_offset), remote, create=True)

    async def write(self, key: ShareStateKey, *, state_epoch: int, leader_epoch: int, start_offset: int | None,
                    batches: tuple[StateBatch, ...], delivery_complete_count: int) -> None:
        """What changed since the last write (`start_offset` None: it did not move)."""

        async def remote(broker_id: int) -> None:
            request = write_req.WriteShareGroupStateRequest(group_id=key.group, topics=(write_req.WriteStateData(
                topic_id=key.topic_id, partitions=(write_req.PartitionData(
                    partition=key.partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                    start_offset=NO_EPOCH if start_offset is None else start_offset,
                    delivery_complete_count=delivery_complete_count, state_batches=tuple(
                        write_req.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                             delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                        for b in batches)),)),))
            _partition_result(await self._send(broker_id, request), key)

        await self._call(key, lambda: self.store.write_update(
            key, start_offset, batches, delivery_complete_count, state_epoch=state_epoch, leader_epoch=leader_epoch),
            remote, create=True)

    async def delete(self, keys: Iterable[ShareStateKey]) -> None:
        for key in keys:
            async def remote(broker_id: int, key: ShareStateKey = key) -> None:
                request = delete_req.DeleteShareGroupStateRequest(group_id=key.group, topics=(
                    delete_req.DeleteStateData(topic_id=key.topic_id, partitions=(
                        delete_req.PartitionData(partition=key.partition),)),))
                _partition_result(await self._send(broker_id, request), key)

            await self._call(key, lambda key=key: self.store.delete([key]), remote)

    async def summary(self, key: ShareStateKey) -> PersistedState | None:
        """The start offset and delivery-complete count (DescribeShareGroupOffsets); None: no state."""

        async def remote(broker_id: int) -> PersistedState | None:
            request = summary_req.ReadShareGroupStateSummaryRequest(group_id=key.group, topics=(
                summary_req.ReadStateSummaryData(topic_id=key.topic_id, partitions=(
                    summary_req.PartitionData(partition=key.partition, leader_epoch=NO_EPOCH),)),))
            result = _partition_result(await self._send(broker_id, request), key)
            if result.start_offset == UNINITIALIZED:
                return None
            return PersistedState(result.state_epoch, result.start_offset, leader_epoch=result.leader_epoch,
                                  delivery_complete_count=result.delivery_complete_count)

        async def local() -> PersistedState | None:
            return self.store.summary(key)

        return await self._call(key, local, remote)

    # ===================================================================== routing
    async def _call(self, key: ShareStateKey, local: Callable[[], Awaitable[T]],
                    remote: Callable[[int], Awaitable[T]], *, create: bool = False) -> T:
        """`local()` where this broker serves the key's state partition (always, alone), else
        `remote(its leader)`; retried while the coordinator is being found, moves or loads."""
        if not self.clustered:
            return await local()
        deadline = time.monotonic() + self.retry_timeout_s
        backoff = FIRST_BACKOFF_S
        while True:
            try:
                coordinator = self._coordinator(key, create)
                return await (local() if coordinator is None else remote(coordinator))
            except BrokerError as exc:
                if exc.code not in RETRIABLE or time.monotonic() + backoff > deadline:
                    raise
                log.debug("share state of %s: %s; retrying in %.2f s", key, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _coordinator(self, key: ShareStateKey, create: bool) -> int | None:
        """The broker serving the key's state partition when it is another one, else None."""
        runtime = self.store.runtime
        if not runtime.topic_exists:
            if not create:
                return None  # no state anywhere: the local store says so
            runtime.ensure_topic()
        index = self.store.partition_for(key)
        if index in runtime.owned():
            return None
        current = self.leadership.leader(STATE_TOPIC, index)
        if current is None or current.leader < 0:
            raise ShareCoordinatorError(f"{STATE_TOPIC}-{index} has no leader now",
                                        ErrorCode.coordinator_not_available)
        # This broker, its takeover not finished: the store answers NOT_COORDINATOR until it is.
        return None if current.leader == self.leadership.broker_id else current.leader

    async def _send(self, broker_id: int, request: Any) -> Any:
        return await self.peers.request(broker_id, request)


def _partition_result(response: Any, key: ShareStateKey) -> Any:
    """The one partition result of a response about `key`; its error raised as ShareCoordinatorError."""
    [topic] = response.results
    [result] = topic.partitions
    if result.error_code != ErrorCode.none:
        raise ShareCoordinatorError(result.error_message or f"{key}: {result.error_code.name}", result.error_code)
    return result
