"""The transaction coordinator: the pure transitions of `state.py`, persisted to
`__transaction_state` and applied through one replay path.

Every change is a record appended to the id's `__transaction_state` partition
(Utils.abs(transactionalId.hashCode) % partitions) and then replayed into the cache; loading
at start replays the same records, so the cache never holds a state that is not on disk.
Requests for one transactional id are serialised by a per-id lock.

EndTxn: persist PrepareCommit/PrepareAbort, append a marker to every partition of the
transaction, tell the group coordinator about markers in `__consumer_offsets` (pending
transactional offsets become visible or vanish), persist CompleteCommit/CompleteAbort. A crash
between the two writes leaves Prepare*, which `start()` (and the periodic check) completes; a
marker written twice is harmless (the second finds no open transaction).

The same periodic check aborts Ongoing transactions older than their timeout (fencing the
producer with an epoch bump) and forgets ids idle past transactional.id.expiration.ms.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, Awaitable, Callable, Iterable

from kio.schema.add_partitions_to_txn.v5 import request as add_req
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as markers_req

from topiclake.segments.errors import UnknownTopicError

from ..clock import SYSTEM, Clock
from ..coordinator_runtime import CoordinatorErrorCode, CoordinatorResult, CoordinatorRuntime, InternalTopic
from ..errors import UnknownTopicOrPartition
from ..group.errors import GroupCoordinatorError
from ..group.java import coordinator_partition
from ..interbroker import InterBrokerClient
from ..leadership import Leadership
from ..markers import COORDINATOR_EPOCH, write_marker
from . import records, state
from .config import TransactionsConfig
from .state import TopicPartition, TxnError, TxnMetadata, TxnState

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"

# Writes the marker to __consumer_offsets partitions and applies it to the group coordinator's
# pending transactional offsets: GroupCoordinator.complete_transaction(producer_id, producer_epoch,
# commit, partitions=[...]).
OffsetsMarker = Callable[..., Awaitable[None]]
TxnShard = dict[str, TxnMetadata]  # the transactional ids of one __transaction_state partition


def _txn_error(code: CoordinatorErrorCode, message: str) -> TxnError:
    return TxnError(ErrorCode(int(code)), message)


class TransactionCoordinator:
    replays_writes = True  # the cache changes only through `replay`, live and at load

    def __init__(self, partitions: Any, producer_ids: Any, config: TransactionsConfig, *,
                 offsets_partition_for: Callable[[str], int], offsets_marker: OffsetsMarker | None = None,
                 clock: Clock = SYSTEM):
        self.partitions = partitions  # PartitionManager
        self.producer_ids = producer_ids  # ProducerIdAllocator
        self.config = config
        self.offsets_partition_for = offsets_partition_for
        self.offsets_marker = offsets_marker
        self.clock = clock
        self.topic = InternalTopic(TRANSACTION_STATE_TOPIC, config.state_topic_partitions, {
            "cleanup.policy": "compact", "segment.bytes": str(config.state_topic_segment_bytes)})
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(partitions, self, error=_txn_error,
                                                                        clock=clock)
        self._locks: dict[str, asyncio.Lock] = {}
        self._last_expiry = time.monotonic()
        # Cluster mode: who leads which partition, and the connections to the other brokers.
        self.leadership: Leadership | None = None
        self.peers: InterBrokerClient | None = None
        self._finishing: asyncio.Future | None = None  # completing what a partition's previous leader left

    # ================================================== the state machine (coordinator runtime)
    def new_shard(self, index: int) -> TxnShard:
        return {}

    def decode(self, key: bytes | None, value: bytes | None) -> records.TxnLogRecord:
        return records.decode_record(key, value)

    def replay(self, shard: TxnShard, record: records.TxnLogRecord, offset: int, producer_id: int, now: int) -> None:
        if record.metadata is None:
            shard.pop(record.transactional_id, None)
        else:
            shard[record.transactional_id] = record.metadata

    def replay_marker(self, shard: TxnShard, producer_id: int, commit: bool, now: int) -> None:
        pass  # __transaction_state holds no transactional batches

    def loaded(self, index: int, shard: TxnShard, count: int) -> None:
        if any(m.is_preparing for m in shard.values()):
            # Taken over mid-commit (cluster mode): finish now, not at the next periodic check.
            self._finishing = asyncio.ensure_future(self.complete_interrupted())
        if shard:
            counts: dict[str, int] = {}
            for m in shard.values():
                counts[m.state.label] = counts.get(m.state.label, 0) + 1
            log.debug("loaded %d transactional ids from %s-%d: %s", len(shard), TRANSACTION_STATE_TOPIC, index,
                     ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))

    def unloaded(self, index: int, shard: TxnShard) -> None:
        pass

    # ================================================================== lifecycle
    async def start(self) -> None:
        """Load `__transaction_state` (if it exists), then finish what a crash interrupted."""
        if self.runtime.open_existing_topic():
            await self.runtime.settle()
        await self.complete_interrupted()
        self._last_expiry = time.monotonic()
        self.runtime.every(self.config.abort_check_interval_ms / 1000, self.run_checks, "transaction coordinator check")

    async def stop(self) -> None:
        await self.runtime.stop()

    async def run_checks(self) -> None:
        """Abort timed-out transactions, retry interrupted ones, expire idle ids (every
        abort_check_interval_ms; ids only every id_expiration_check_interval_ms)."""
        await self.abort_expired()
        await self.complete_interrupted()
        if time.monotonic() - self._last_expiry >= self.config.id_expiration_check_interval_ms / 1000:
            self._last_expiry = time.monotonic()
            await self.expire_ids()

    # ==================================================================== queries
    def partition_for(self, transactional_id: str) -> int:
        return coordinator_partition(transactional_id, self.runtime.partition_count)

    def get(self, transactional_id: str) -> TxnMetadata | None:
        """The id's metadata as loaded now (TxnError COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR
        when its partition is not served here now); None before `__transaction_state` exists."""
        if not self.runtime.topic_exists:
            return None
        return self.runtime.active(self.partition_for(transactional_id)).state.get(transactional_id)

    async def lookup(self, transactional_id: str) -> TxnMetadata | None:
        """As `get`, waiting while the id's partition loads."""
        if not self.runtime.topic_exists:
            return None
        return (await self.runtime.wait_active(self.partition_for(transactional_id))).state.get(transactional_id)

    async def transactions(self) -> dict[str, TxnMetadata]:
        """Every transactional id of the partitions served here (once they have loaded)."""
        await self.runtime.settle()
        return self._loaded_transactions()

    def _loaded_transactions(self) -> dict[str, TxnMetadata]:
        return {txn_id: m for shard in self.runtime.active_shards() for txn_id, m in shard.state.items()}

    async def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                             topic: str, partition: int) -> None:
        """A transactional batch may only go to a partition of the producer's Ongoing
        transaction (KIP-890's verification, answered locally, or by the id's coordinator when
        another broker is it)."""
        where = f"transactional produce to {topic}-{partition} by producer {producer_id} epoch {producer_epoch}"
        if transactional_id is None:
            raise TxnError(ErrorCode.transactional_id_authorization_failed,
                           f"{where}: the request carries no transactional id")
        remote = self._remote_coordinator(transactional_id)
        if remote is not None:
            await self._ask_remote(remote, transactional_id, producer_id, producer_epoch, [(topic, partition)],
                                   verify_only=True)
            return
        m = await self.lookup(transactional_id)
        if m is None or m.producer_id != producer_id:
            raise TxnError(ErrorCode.invalid_producer_id_mapping,
                           f"{where}: transactional id {transactional_id!r} is not mapped to this producer")
        if m.producer_epoch != producer_epoch:
            raise TxnError(ErrorCode.invalid_producer_epoch,
                           f"{where}: {m.describe()} has another epoch (fenced)")
        if m.state is not TxnState.ONGOING or (topic, partition) not in m.partitions:
            raise TxnError(ErrorCode.invalid_txn_state,
                           f"{where}: {topic}-{partition} is not part of an ongoing transaction of {m.describe()}")

    # ================================================================== requests
    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> TxnMetadata:
        if not transactional_id:
            raise TxnError(ErrorCode.invalid_request, "InitProducerId with an empty transactional id")
        state.validate_timeout(transactional_id, timeout_ms, self.config.max_timeout_ms)
        async with self._lock(transactional_id):
            current = await self.lookup(transactional_id)
            outcome = state.init_producer_id(current, transactional_id, timeout_ms, self.clock(),
                                             await self._id_source(state.needs_new_producer_id(current)), expected)
            if outcome.abort_first:
                # A new instance of the producer: abort its predecessor's transaction (fencing it)
                # now, then bump again for the new instance, as the client's retry after
                # CONCURRENT_TRANSACTIONS would.
                log.info("%s: a new producer instance aborts the ongoing transaction", current.describe())
                await self._persist(outcome.metadata)
                if not await self._try_complete(outcome.metadata):
                    raise TxnError(ErrorCode.concurrent_transactions,
                                   f"InitProducerId for {transactional_id!r}: aborting the previous transaction")
                current = await self.lookup(transactional_id)
                outcome = state.init_producer_id(current, transactional_id, timeout_ms, self.clock(),
                                                 await self._id_source(state.needs_new_producer_id(current)), None)
            await self._persist(outcome.metadata)
            return await self.lookup(transactional_id)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition], *, tv2: bool = False) -> None:
        """AddPartitionsToTxn; `tv2`: added by the broker itself for a transactions-v2 client
        (Produce v12+, TxnOffsetCommit v5+), which no longer sends AddPartitionsToTxn; then the
        id's coordinator may be another broker (cluster mode), which is asked."""
        if tv2:
            remote = self._remote_coordinator(transactional_id)
            if remote is not None:
                await self._ask_remote(remote, transactional_id, producer_id, producer_epoch, partitions,
                                       verify_only=False)
                return
        async with self._lock(transactional_id):
            m = await self._require(transactional_id, producer_id, "AddPartitionsToTxn")
            updated = state.add_partitions(m, producer_id, producer_epoch, partitions, self.clock(), tv2=tv2)
            if updated is not m:
                await self._persist(updated)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, *,
                          tv2: bool = False) -> None:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction."""
        await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                  [(OFFSETS_TOPIC, self.offsets_partition_for(group_id))], tv2=tv2)

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: Iterable[TopicPartition]) -> dict[TopicPartition, state.ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only: which partitions are in the ongoing transaction."""
        m = await self._require(transactional_id, producer_id, "AddPartitionsToTxn (verify only)")
        state.check_producer(m, producer_id, producer_epoch, f"verify {transactional_id!r}")
        ongoing = m.state is TxnState.ONGOING
        return {tp: (ErrorCode.none if ongoing and tp in m.partitions else ErrorCode.invalid_txn_state)
                for tp in partitions}

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool, *, tv2: bool = False) -> tuple[int, int]:
        """EndTxn; `tv2` (v5+): the epoch is bumped and the producer id and epoch the client must
        use next are returned. Without it the returned pair means nothing (-1, -1)."""
        async with self._lock(transactional_id):
            m = await self._require(transactional_id, producer_id, "EndTxn")
            if tv2:
                new_id = await self._id_source(state.needs_new_producer_id_to_end(m))
                outcome = state.end_transaction_v2(m, producer_id, producer_epoch, commit, self.clock(), new_id)
            else:
                outcome = state.end_transaction(m, producer_id, producer_epoch, commit, self.clock())
            if outcome.metadata is None:
                return outcome.producer  # a retry: the transaction already ended this way
            await self._persist(outcome.metadata)
            # The decision is durable now: like Kafka, answer success even if a marker write
            # fails; the periodic check finishes the transaction (the client's next
            # InitProducerId/AddPartitions meanwhile gets CONCURRENT_TRANSACTIONS).
            await self._try_complete(outcome.metadata)
            return outcome.producer

    # ============================================================ coordinator-driven
    async def abort_expired(self) -> list[str]:
        """Abort (and fence) every Ongoing transaction past its timeout; returns their ids."""
        aborted = []
        for txn_id, m in self._loaded_transactions().items():
            if not state.is_expired(m, self.clock()):
                continue
            async with self._lock(txn_id):
                m = await self.lookup(txn_id)
                if m is None or not state.is_expired(m, self.clock()):
                    continue
                log.info("%s: transaction started at %d timed out after %d ms; aborting it and fencing the "
                         "producer", m.describe(), m.start_ms, m.timeout_ms)
                fenced = state.fence_abort(m, self.clock())
                await self._persist(fenced)
                await self._try_complete(fenced)
                aborted.append(txn_id)
        return aborted

    async def complete_interrupted(self) -> None:
        """Finish transactions left in PrepareCommit/PrepareAbort (a crash or a failed marker write)."""
        for txn_id, m in self._loaded_transactions().items():
            if not m.is_preparing:
                continue
            async with self._lock(txn_id):
                m = await self.lookup(txn_id)
                if m is not None and m.is_preparing:
                    log.info("%s: completing the interrupted transaction", m.describe())
                    await self._try_complete(m)

    async def expire_ids(self) -> list[str]:
        """Forget transactional ids with no transaction for transactional.id.expiration.ms (a tombstone)."""
        expired = []
        for txn_id, m in self._loaded_transactions().items():
            if m.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and \
                    m.update_ms + self.config.id_expiration_ms < self.clock():
                async with self._lock(txn_id):
                    if await self.lookup(txn_id) is m:
                        m.transition(TxnState.DEAD)  # checks the transition; Dead is written as a tombstone
                        await self._append(records.TxnLogRecord(txn_id, None))
                        expired.append(txn_id)
        return expired

    # =================================================================== internals
    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    async def _require(self, transactional_id: str, producer_id: int, what: str) -> TxnMetadata:
        m = await self.lookup(transactional_id)
        if m is None:
            raise TxnError(ErrorCode.invalid_producer_id_mapping,
                           f"{what}: unknown transactional id {transactional_id!r} (producer {producer_id})")
        return m

    async def _id_source(self, needed: bool) -> Callable[[], int]:
        """A producer id for the transition, fetched first when it may need one: the allocator
        is not thread-safe and writes its block file, so it runs on the I/O thread only."""
        if not needed:
            return _no_new_id
        new_id = await self.partitions.run_io(self.producer_ids.next_id)
        return lambda: new_id

    async def _try_complete(self, m: TxnMetadata) -> bool:
        try:
            await self._complete(m)
            return True
        except Exception as exc:
            log.warning("%s: writing the markers failed (%s: %s); retrying every %d ms", m.describe(),
                        type(exc).__name__, exc, self.config.abort_check_interval_ms,
                        exc_info=not isinstance(exc, (TxnError, GroupCoordinatorError)))
            return False

    async def _complete(self, m: TxnMetadata) -> None:
        """Markers for a PrepareCommit/PrepareAbort transaction, then Complete*. A partition led by
        another broker (cluster mode) gets its marker through that broker (WriteTxnMarkers)."""
        commit = m.state is TxnState.PREPARE_COMMIT
        now = self.clock()
        coordinator_epoch = await self._coordinator_epoch(m.transactional_id)
        remote: dict[int, list[TopicPartition]] = {}
        local = []
        for topic, index in sorted(m.partitions):
            leader = self._leader_of(topic, index)
            if leader is None:
                local.append((topic, index))
            else:
                remote.setdefault(leader, []).append((topic, index))
        offsets_partitions = sorted(i for t, i in local if t == OFFSETS_TOPIC)
        for topic, index in local:
            if topic == OFFSETS_TOPIC and self.offsets_marker is not None:
                continue  # the group coordinator writes these (below)
            try:
                part = await self.partitions.get(topic, index)
            except (UnknownTopicError, UnknownTopicOrPartition):  # deleted meanwhile: Kafka skips it too
                log.warning("%s: %s-%d no longer exists; no marker written there", m.describe(), topic, index)
                continue
            await self.partitions.run_io(functools.partial(write_marker, part, m.producer_id, m.producer_epoch, commit,
                                                           now, coordinator_epoch=coordinator_epoch))
            part.notify()
        if offsets_partitions and self.offsets_marker is not None:
            await self.offsets_marker(m.producer_id, m.producer_epoch, commit, partitions=offsets_partitions,
                                      coordinator_epoch=coordinator_epoch)
        for broker_id, partitions in sorted(remote.items()):
            await self._write_remote_markers(m, commit, coordinator_epoch, broker_id, partitions)
        await self._persist(state.complete(m, self.clock()))
        log.debug("%s: %s", m.describe(), "committed" if commit else "aborted")

    # ================================================= cluster mode: other brokers' partitions
    def _leader_of(self, topic: str, index: int) -> int | None:
        """The broker leading the partition when it is not this one (cluster mode), else None."""
        leadership = self.leadership
        if leadership is None or not leadership.clustered or leadership.leads(topic, index):
            return None
        current = leadership.leader(topic, index)
        if current is None or current.leader < 0:
            raise TxnError(ErrorCode.not_leader_or_follower, f"{topic}-{index} has no leader now")
        return current.leader

    async def _coordinator_epoch(self, transactional_id: str) -> int:
        """The leader epoch of the id's __transaction_state partition: markers carry it, so a
        coordinator that lost the partition cannot end the transaction again (Kafka's
        coordinatorEpoch)."""
        if not self.runtime.topic_exists:
            return COORDINATOR_EPOCH
        shard = await self.runtime.wait_active(self.partition_for(transactional_id))
        return shard.partition.leader_epoch if shard.partition is not None else COORDINATOR_EPOCH

    async def _write_remote_markers(self, m: TxnMetadata, commit: bool, coordinator_epoch: int, broker_id: int,
                                    partitions: list[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = markers_req.WriteTxnMarkersRequest(markers=(markers_req.WritableTxnMarker(
            producer_id=m.producer_id, producer_epoch=m.producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch, topics=tuple(
                markers_req.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps))
                for t, ps in by_topic.items())),))
        response = await self.peers.request(broker_id, request)
        failed = [(t.name, p.partition_index, p.error_code) for r in response.markers for t in r.topics
                  for p in t.partitions if p.error_code not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition)]
        if failed:
            raise TxnError(failed[0][2], f"{m.describe()}: broker {broker_id} did not write the markers of " +
                           ", ".join(f"{t}-{p} ({code.name})" for t, p, code in failed))

    def _remote_coordinator(self, transactional_id: str) -> int | None:
        """The broker coordinating the id when it is another one (cluster mode), else None."""
        leadership = self.leadership
        if leadership is None or not leadership.clustered or not self.runtime.topic_exists:
            return None
        index = self.partition_for(transactional_id)
        if index in self.runtime.owned():
            return None
        current = leadership.leader(TRANSACTION_STATE_TOPIC, index)
        if current is None or current.leader < 0:
            raise TxnError(ErrorCode.coordinator_not_available,
                           f"{TRANSACTION_STATE_TOPIC}-{index} (transactional id {transactional_id!r}) has no leader")
        return current.leader

    async def _ask_remote(self, broker_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition], verify_only: bool) -> None:
        """KIP-890: the partition leader asks the coordinator to verify (v4) or add (v5) partitions."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = add_req.AddPartitionsToTxnRequest(transactions=(add_req.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=verify_only, topics=tuple(add_req.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                                                  for t, ps in by_topic.items())),))
        response = await self.peers.request(broker_id, request)
        if response.error_code != ErrorCode.none:
            raise TxnError(response.error_code, f"coordinator {broker_id}: {response.error_code.name}")
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    if p.partition_error_code != ErrorCode.none:
                        raise TxnError(p.partition_error_code, f"transactional produce to {topic.name}-"
                                       f"{p.partition_index}: coordinator {broker_id} answered "
                                       f"{p.partition_error_code.name}")

    async def _persist(self, m: TxnMetadata) -> None:
        await self._append(records.TxnLogRecord(m.transactional_id, m))

    async def _append(self, record: records.TxnLogRecord) -> None:
        """Append one record to the id's partition (creating `__transaction_state` on first use,
        as Kafka does); the runtime replays it into the cache once it is in the log."""
        self.runtime.ensure_topic()
        await self.runtime.write(self.partition_for(record.transactional_id),
                                 lambda shard, now: CoordinatorResult(None, (record,)), wait=True)


def _no_new_id() -> int:
    raise AssertionError("this transition keeps its producer id")
