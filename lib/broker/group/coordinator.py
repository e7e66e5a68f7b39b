"""The group coordinator inside the broker: one shard per `__consumer_offsets` partition.

A shard holds the pure cores of its partition (`classic.GroupCoordinator` for classic groups
and all offsets, `consumer.ConsumerGroups` for KIP-848 groups) and one asyncio lock. Every call
runs "core call -> append its records to the partition's log -> answer" under that lock, so no
response (nor any earlier parked JoinGroup/SyncGroup completed by the call) leaves before its
records are in the log. If an append fails the shard is reloaded from its log: the state is
only ever what the log says, and every parked request is answered COORDINATOR_NOT_AVAILABLE,
which makes clients rediscover the coordinator and retry.

KIP-848 groups take the same path: after each call the shard takes the records of the groups
it changed (`ConsumerGroups.take_records`, topics as ids of the topic registry) and appends
them before answering. KIP-848's online migration rides on it too (`migration`): a consumer
member joining a classic group converts it first, classic members of a consumer group are
served by `consumer_classic`, and a consumer group left with only classic members is
converted back at the end of the call that made it so, all in the call's one append.
Share groups (KIP-932, `topiclake.broker.share.groups.ShareGroups`) too;
what happens to their records when a member times out or the group is deleted is the share
layer's business (`share_hooks`).

Loading replays the partition from its start: classic and offset records through the same
`replay` the live path uses (`replay_end_txn` per transaction marker), KIP-848 records (types
3-8) through `ConsumerGroups.replay`, share-group records (10-15) through `ShareGroups.replay`,
topic ids resolved by the topic registry. Until a shard
is loaded its groups answer COORDINATOR_LOAD_IN_PROGRESS. A timer task drives session/rebalance
deadlines (`tick`) and offset retention (`expire_offsets`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from topiclake.segments.batch import Record, build_batch, iter_batches, read_header
from topiclake.segments.control import ControlRecordType, parse_control_record
from topiclake.segments.errors import TopicAlreadyExistsError, TopiclakeError, UnknownTopicError

from ..partitions import INTERNAL_TOPICS, topic_uuid
from ..request_time import waiting
from ..share.config import ShareConfig
from ..share.group_records import ShareGroupKey
from ..share.groups import ShareGroup, ShareGroups, ShareHeartbeatRequest, ShareHeartbeatResponse
from ..txn.markers import write_marker
from .api import (CommitOffset, GroupDescription, GroupResult, HeartbeatRequest, JoinRequest, JoinResponse,
                  LeaveResponse, ListedGroup, MemberIdentity, OffsetCommitRequest, OffsetDeleteResponse,
                  OffsetFetchResponse, PartitionResult, Result, SyncRequest, SyncResponse)
from . import consumer_classic, migration
from .classic import GroupCoordinator
from .config import GroupsConfig
from .consumer import ConsumerGroup, ConsumerGroups, ConsumerHeartbeatRequest, ConsumerHeartbeatResponse
from .errors import GroupCoordinatorError, GroupErrorCode as E
from .group_configs import GroupConfigs
from .offsets import TxnOffsetCommitRequest
from .op import NO_PRODUCER_ID
from .records import ConsumerGroupKey, CoordinatorRecord, decode_record, partition_for_group

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK_BYTES = 4 * 1024 * 1024
LEADER_EPOCH = 0


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class Shard:
    index: int
    core: GroupCoordinator
    consumer: ConsumerGroups
    share: ShareGroups
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loaded: bool = False
    waiters: dict[int, asyncio.Future] = field(default_factory=dict)
    partition: Any = None  # the open Partition of __consumer_offsets-<index>


class ShareHooks:
    """What the share layer does when a share-group member times out or a share group is deleted
    (releases the member's records; deletes the group's share-partition state)."""

    async def member_removed(self, group_id: str, member_id: str) -> None:
        pass

    async def group_deleted(self, group_id: str) -> None:
        pass


class GroupService:
    """The facade handlers call. Methods raise GroupCoordinatorError for whole-request errors
    (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE)."""

    def __init__(self, partitions: Any, config: GroupsConfig = GroupsConfig(), share: ShareConfig = ShareConfig()):
        self.partitions = partitions  # the broker's PartitionManager
        self.config = config
        self.share_config = share
        self.configs = GroupConfigs(partitions.layout, config, share)  # GROUP config resources
        self.migration_policy = config.migration_policy()
        self.share_hooks = ShareHooks()
        self.shards = [self._new_shard(i) for i in range(config.offsets_topic_partitions)]
        self._tasks: list[asyncio.Task] = []
        self._loading: asyncio.Task | None = None

    def _new_shard(self, index: int) -> Shard:
        return Shard(index, GroupCoordinator(self.config.classic()),
                     ConsumerGroups(self.config.consumer_session_timeout_ms, self.config.consumer_heartbeat_interval_ms,
                                    group_timeouts=self._consumer_timeouts,
                                    downgrade_enabled=self.config.migration_policy().downgrade_enabled,
                                    topic_names=lambda: [m.name for m in self.partitions.topics()
                                                         if m.name not in INTERNAL_TOPICS]),
                     ShareGroups(lambda g: int(self.configs.value(g, "share.session.timeout.ms")),
                                 lambda g: int(self.configs.value(g, "share.heartbeat.interval.ms")),
                                 self.share_config.max_size))

    def _consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        return self.configs.session_timeout_ms(group_id), self.configs.heartbeat_interval_ms(group_id)

    # ===================================================================== lifecycle
    async def start(self) -> None:
        """Start the timer; if `__consumer_offsets` exists, load every partition in the background
        (otherwise the first group request creates it, as Kafka's FindCoordinator does)."""
        self._tasks = [asyncio.create_task(self._timer())]
        if self.partitions.registry.exists(OFFSETS_TOPIC):
            self.ensure_loading()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for shard in self.shards:
            self._fail_waiters(shard)

    def ensure_loading(self) -> None:
        """Create `__consumer_offsets` if needed and start loading its partitions (once)."""
        if self._loading is not None:
            return
        cfg = self.config
        try:
            meta = self.partitions.topic(OFFSETS_TOPIC, fresh=True)
        except UnknownTopicError:
            try:
                meta = self.partitions.create_topic(OFFSETS_TOPIC, cfg.offsets_topic_partitions, {
                    "cleanup.policy": "compact", "segment.bytes": str(cfg.offsets_topic_segment_bytes),
                    "compression.type": "producer"})
                log.info("created %s with %d partitions", OFFSETS_TOPIC, meta.partitions)
            except TopicAlreadyExistsError:
                meta = self.partitions.topic(OFFSETS_TOPIC, fresh=True)
        if meta.partitions != len(self.shards):
            # The topic decides: group -> partition must not change under existing offsets.
            log.warning("%s has %d partitions, [groups] offsets_topic_partitions says %d: using %d",
                        OFFSETS_TOPIC, meta.partitions, len(self.shards), meta.partitions)
            self.shards = [self._new_shard(i) for i in range(meta.partitions)]
        self._loading = asyncio.create_task(self._load_all())
        self._tasks.append(self._loading)

    async def _load_all(self) -> None:
        for shard in self.shards:
            async with shard.lock:
                await self._load(shard)

    async def _load(self, shard: Shard) -> None:
        """(Re)build the shard from its log; the caller holds the lock."""
        shard.loaded = False
        self._fail_waiters(shard)
        fresh = self._new_shard(shard.index)
        shard.core, shard.consumer, shard.share = fresh.core, fresh.consumer, fresh.share
        part = shard.partition = await self.partitions.get(OFFSETS_TOPIC, shard.index)
        count = await self.partitions.run_read(_replay_log, part.log, shard, self.partitions.registry, now_ms(),
                                               f"{OFFSETS_TOPIC}-{shard.index}")
        shard.loaded = True
        if count:
            log.info("loaded %s-%d: %d records, %d groups", OFFSETS_TOPIC, shard.index, count,
                     len(shard.core.groups))

    def _fail_waiters(self, shard: Shard) -> None:
        waiters, shard.waiters = shard.waiters, {}
        for fut in waiters.values():
            if not fut.done():
                fut.set_exception(GroupCoordinatorError(E.COORDINATOR_NOT_AVAILABLE))

    async def _timer(self) -> None:
        interval = self.config.tick_interval_ms / 1000
        next_expiry = now_ms() + self.config.offsets_retention_check_interval_ms
        while True:
            await asyncio.sleep(interval)
            now = now_ms()
            expire = now >= next_expiry
            if expire:
                next_expiry = now + self.config.offsets_retention_check_interval_ms
            for shard in self.shards:
                try:
                    await self._tick(shard, now, expire)
                except GroupCoordinatorError:
                    pass  # the append failed and the shard was reloaded
                except Exception:
                    log.exception("group timer of %s-%d failed", OFFSETS_TOPIC, shard.index)

    async def _tick(self, shard: Shard, now: int, expire: bool) -> None:
        if not shard.loaded:
            return
        due = [d for d in (shard.core.next_deadline_ms(), shard.consumer.next_deadline_ms(),
                           shard.share.next_deadline_ms()) if d is not None]
        if not expire and not any(d <= now for d in due):
            return
        removed = await self._run_consumer(shard, shard.consumer.tick)
        for group_id, member_id in removed:
            log.info("group %s: member %s left (session or revocation timeout)", group_id, member_id)
        for group_id, member_id in await self._run_records(shard, shard.share.tick, shard.share.take_records):
            log.info("share group %s: member %s left (session timeout)", group_id, member_id)
            await self.share_hooks.member_removed(group_id, member_id)
        await self._run(shard, lambda t: shard.core.tick(t))
        if expire:
            # An empty KIP-848 group protects no offsets: they expire, and then the group goes too.
            subs = {gid: topics for gid, topics in shard.consumer.subscriptions().items()
                    if shard.consumer.groups[gid].members}
            await self._run(shard, lambda t: shard.core.expire_offsets(t, subs))
            for group_id in await self._run_consumer(shard, lambda t: self._delete_empty_consumer_groups(shard)):
                log.info("group %s: empty and without offsets: deleted", group_id)

    @staticmethod
    def _delete_empty_consumer_groups(shard: Shard) -> list[str]:
        """Kafka's offset clean-up also deletes a KIP-848 group that is empty and has no offsets
        left (none committed, or all expired)."""
        gone = [gid for gid, group in shard.consumer.groups.items()
                if not group.members and gid not in shard.core.groups and not shard.core.has_pending_txn_offsets(gid)]
        for gid in gone:
            shard.consumer.delete(gid)
        return gone

    # ======================================================================= plumbing
    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, len(self.shards))

    def shard(self, group_id: str) -> Shard:
        self.ensure_loading()
        shard = self.shards[self.partition_for(group_id)]
        if not shard.loaded:
            raise GroupCoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS,
                                        f"{OFFSETS_TOPIC}-{shard.index} (group {group_id}) is loading")
        return shard

    async def _run(self, shard: Shard, call: Callable[[int], Result], *, producer_id: int = NO_PRODUCER_ID,
                   producer_epoch: int = -1) -> Any:
        """The recipe of classic.py: call, park, append, answer. Returns the response. The
        records: the call's, then those of the KIP-848 groups it changed (`migration.finish`)."""
        async with shard.lock:
            if not shard.loaded:
                raise GroupCoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS)
            now = now_ms()
            result = migration.finish(shard.core, shard.consumer, call(now), self._topic_id, now)
            records = result.records
            parked = None
            if result.response is None and result.ticket is not None:
                parked = shard.waiters[result.ticket] = asyncio.get_running_loop().create_future()
            if records:
                try:
                    await self._append(shard, records, producer_id, producer_epoch)
                except Exception:
                    log.exception("appending %d records to %s-%d failed: reloading it", len(records),
                                  OFFSETS_TOPIC, shard.index)
                    await self._load(shard)
                    raise GroupCoordinatorError(E.COORDINATOR_NOT_AVAILABLE) from None
            for c in result.completions:
                fut = shard.waiters.pop(c.ticket, None)
                if fut is not None and not fut.done():
                    fut.set_result(c.response)
        if parked is None:
            return result.response
        try:
            with waiting():  # parked until the rebalance moves on: not busy time (request quota)
                return await parked
        finally:
            shard.waiters.pop(result.ticket, None)

    async def _run_consumer(self, shard: Shard, call: Callable[[int], Any]) -> Any:
        """The same recipe for a call of the KIP-848 core, which answers at once."""
        return await self._run(shard, lambda t: Result(call(t)))

    def _partition_count(self, topic: str) -> int | None:
        try:
            return self.partitions.topic(topic).partitions
        except TopiclakeError:
            return None

    async def _run_records(self, shard: Shard, call: Callable[[int], Any],
                           take_records: Callable[[Callable[[str], uuid.UUID | None]], list]) -> Any:
        """Share groups: call the core, append what `take_records` says changed, answer; a failed
        append reloads the shard (COORDINATOR_NOT_AVAILABLE)."""
        async with shard.lock:
            if not shard.loaded:
                raise GroupCoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS)
            response = call(now_ms())
            records = take_records(self._topic_id)
            if records:
                try:
                    await self._append(shard, records, NO_PRODUCER_ID, -1)
                except Exception:
                    log.exception("appending %d share group records to %s-%d failed: reloading it",
                                  len(records), OFFSETS_TOPIC, shard.index)
                    await self._load(shard)
                    raise GroupCoordinatorError(E.COORDINATOR_NOT_AVAILABLE) from None
            return response

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        try:
            return topic_uuid(self.partitions.topic(topic))
        except TopiclakeError:
            return None

    async def _append(self, shard: Shard, records: Iterable[CoordinatorRecord], producer_id: int,
                      producer_epoch: int) -> None:
        ts = now_ms()
        batch = build_batch([Record(i, ts, r.key_bytes(), r.value_bytes()) for i, r in enumerate(records)],
                            base_offset=0, producer_id=producer_id, producer_epoch=producer_epoch,
                            base_sequence=0 if producer_id != NO_PRODUCER_ID else -1,
                            is_transactional=producer_id != NO_PRODUCER_ID, partition_leader_epoch=LEADER_EPOCH)
        await self._append_batch(shard, batch)

    async def _append_batch(self, shard: Shard, batch: bytes) -> None:
        part = shard.partition

        # The partition's producer and transaction state follow the append, as for Produce: a
        # transactional offsets batch holds back this partition's LSO until its marker.
        await self.partitions.run_io(part.append_batch, batch, read_header(batch), LEADER_EPOCH)
        part.notify()

    # ================================================================ classic groups
    # Classic members of a consumer group are served by consumer_classic (KIP-848 migration).
    def _not_share_group(self, shard: Shard, group_id: str) -> None:
        if group_id in shard.share.groups:
            raise GroupCoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL, f"group {group_id} is a share group")

    async def join(self, req: JoinRequest) -> JoinResponse:
        shard = self.shard(req.group_id)
        self._not_share_group(shard, req.group_id)
        return await self._run(shard, lambda t: migration.join(shard.core, shard.consumer, req,
                                                               self._partition_count, t))

    async def sync(self, req: SyncRequest) -> SyncResponse:
        shard = self.shard(req.group_id)
        if req.group_id in shard.consumer.groups:
            return await self._run_consumer(shard, lambda t: consumer_classic.sync(shard.consumer, req, t))
        return await self._run(shard, lambda t: shard.core.sync(req, t))

    async def heartbeat(self, req: HeartbeatRequest) -> E:
        shard = self.shard(req.group_id)
        if req.group_id in shard.consumer.groups:
            return await self._run_consumer(shard, lambda t: consumer_classic.heartbeat(shard.consumer, req, t))
        return await self._run(shard, lambda t: shard.core.heartbeat(req, t))

    async def leave(self, group_id: str, members: Iterable[MemberIdentity]) -> LeaveResponse:
        shard = self.shard(group_id)
        members = tuple(members)
        if group_id in shard.consumer.groups:
            return await self._run_consumer(shard, lambda t: consumer_classic.leave(shard.consumer, group_id, members))
        return await self._run(shard, lambda t: shard.core.leave(group_id, members, t))

    # ======================================================================= offsets
    async def commit_offsets(self, req: OffsetCommitRequest) -> tuple[PartitionResult, ...]:
        shard = self.shard(req.group_id)
        verdict = shard.consumer.validate_offset_commit(req.group_id, req.member_id, req.generation_id)
        if verdict is not None:
            if verdict is not E.NONE:
                return tuple(PartitionResult(o.topic, o.partition, verdict) for o in req.offsets)
            # A KIP-848 member's commit: stored like a standalone one (the epoch was checked above).
            req = OffsetCommitRequest(req.group_id, req.offsets, retention_time_ms=req.retention_time_ms)
        return await self._run(shard, lambda t: shard.core.commit_offsets(req, t))

    async def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None, *,
                            require_stable: bool = False, member_id: str | None = None,
                            member_epoch: int = -1) -> OffsetFetchResponse:
        shard = self.shard(group_id)
        if member_id is not None and member_epoch >= 0:
            verdict = shard.consumer.validate_offset_commit(group_id, member_id, member_epoch)
            if verdict not in (None, E.NONE):
                return OffsetFetchResponse(verdict)
        return shard.core.fetch_offsets(group_id, None if partitions is None else list(partitions), require_stable)

    async def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> OffsetDeleteResponse:
        shard = self.shard(group_id)
        partitions = list(partitions)
        group = shard.consumer.groups.get(group_id)
        if group is not None and group.members:
            subscribed = group.subscribed_topics()
            return await self._run(shard, lambda t: _delete_unsubscribed(shard.core, group_id, partitions,
                                                                         subscribed, t))
        return await self._run(shard, lambda t: shard.core.delete_offsets(group_id, partitions, t))

    # ====================================================== transactional offsets (KIP-98)
    async def commit_transactional_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                           offsets: Iterable[CommitOffset], *, generation_id: int = -1,
                                           member_id: str = "", group_instance_id: str | None = None
                                           ) -> tuple[PartitionResult, ...]:
        """TxnOffsetCommit: write the offsets into `__consumer_offsets` inside the producer's
        transaction (a transactional batch of producer_id/producer_epoch). They are invisible to
        OffsetFetch (UNSTABLE_OFFSET_COMMIT with require_stable) until `complete_transaction`."""
        shard = self.shard(group_id)
        offsets = tuple(offsets)
        verdict = shard.consumer.validate_offset_commit(group_id, member_id, generation_id, transactional=True)
        if verdict is not None:
            if verdict is not E.NONE:
                return tuple(PartitionResult(o.topic, o.partition, verdict) for o in offsets)
            generation_id, member_id = -1, ""
        req = TxnOffsetCommitRequest(group_id, producer_id, producer_epoch, offsets, generation_id, member_id,
                                     group_instance_id)
        return await self._run(shard, lambda t: shard.core.commit_transactional_offsets(req, t),
                               producer_id=producer_id, producer_epoch=producer_epoch)

    async def complete_transaction(self, producer_id: int, producer_epoch: int, commit: bool, *,
                                   coordinator_epoch: int = 0, partitions: Iterable[int] | None = None) -> None:
        """Write the COMMIT/ABORT marker of `producer_id` to `__consumer_offsets` partitions and
        materialise (commit) or drop (abort) its pending offsets there. `partitions`: the
        `__consumer_offsets` partitions in the transaction (AddOffsetsToTxn adds
        `partition_for(group)`); None = every partition where this producer has pending offsets.
        Call this instead of writing markers to `__consumer_offsets` yourself."""
        indexes = (sorted(set(partitions)) if partitions is not None else
                   [s.index for s in self.shards if producer_id in s.core.pending_txn_offsets])
        for index in indexes:
            shard = self.shards[index]
            async with shard.lock:
                if not shard.loaded:
                    raise GroupCoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS)
                part = shard.partition
                try:
                    # The one marker path (txn.markers): it also releases this partition's LSO
                    # and applies the producer epoch, live.
                    await self.partitions.run_io(functools.partial(
                        write_marker, part, producer_id, producer_epoch, commit, now_ms(),
                        coordinator_epoch=coordinator_epoch))
                except Exception:
                    log.exception("writing the %s marker of producer %d to %s-%d failed: reloading it",
                                  "COMMIT" if commit else "ABORT", producer_id, OFFSETS_TOPIC, index)
                    await self._load(shard)
                    raise GroupCoordinatorError(E.COORDINATOR_NOT_AVAILABLE) from None
                part.notify()
                shard.core.replay_end_txn(producer_id, commit, now_ms())

    # ================================================================ KIP-848 groups
    async def consumer_heartbeat(self, req: ConsumerHeartbeatRequest,
                                 metadata: Callable[[str], int | None]) -> ConsumerHeartbeatResponse:
        shard = self.shard(req.group_id)
        if req.group_id in shard.share.groups:
            return ConsumerHeartbeatResponse(E.GROUP_ID_NOT_FOUND, req.member_id or None,
                                             error_message=f"group {req.group_id} is a share group")
        return await self._run(shard, lambda t: migration.consumer_heartbeat(
            shard.core, shard.consumer, req, metadata, self.migration_policy, t))

    def consumer_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ConsumerGroup | None, E]]:
        return self._lookup(group_ids, lambda shard: shard.consumer.groups)

    def _lookup(self, group_ids: Iterable[str], groups_of: Callable[[Shard], dict]) -> list[tuple[str, Any, E]]:
        """(group id, the group in `groups_of(shard)` or None, error) for each id."""
        out = []
        for gid in group_ids:
            try:
                shard = self.shard(gid)
            except GroupCoordinatorError as exc:
                out.append((gid, None, exc.code))
                continue
            group = groups_of(shard).get(gid)
            out.append((gid, group, E.NONE if group is not None else E.GROUP_ID_NOT_FOUND))
        return out

    # ============================================================== share groups
    async def share_heartbeat(self, req: ShareHeartbeatRequest,
                              metadata: Callable[[str], int | None]) -> ShareHeartbeatResponse:
        shard = self.shard(req.group_id)
        classic = shard.core.groups.get(req.group_id)
        if req.group_id in shard.consumer.groups or (classic is not None and classic.members):
            return ShareHeartbeatResponse(E.GROUP_ID_NOT_FOUND, req.member_id or None,
                                          error_message=f"Group {req.group_id} is not a share group.")
        # A member that leaves closes its share session itself, acknowledging what it holds: its
        # records are not released here (that would race the acknowledgements in flight).
        return await self._run_records(shard, lambda t: shard.share.heartbeat(req, metadata, t, self._topic_id),
                                       shard.share.take_records)

    def share_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ShareGroup | None, E]]:
        return self._lookup(group_ids, lambda shard: shard.share.groups)

    async def run_share(self, group_id: str, call: Callable[[ShareGroups, int], Any]) -> Any:
        """Run `call(share core, now)` on the group's shard and persist what it changed."""
        shard = self.shard(group_id)
        return await self._run_records(shard, lambda t: call(shard.share, t), shard.share.take_records)

    # ========================================================== describe, list, delete
    def describe(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        out = []
        for gid in group_ids:
            try:
                shard = self.shard(gid)
            except GroupCoordinatorError as exc:
                out.append(GroupDescription(gid, exc.code, "", "", ""))
                continue
            group = shard.consumer.groups.get(gid)
            if group is not None:  # described in classic terms; members carry no blobs
                out.append(_describe_consumer_group(group))
            else:
                out.append(shard.core.describe([gid])[0])
        return out

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[tuple[ListedGroup, str]]:
        """(group, group type "classic" | "consumer") of every loaded shard."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        out = []
        for shard in self.shards:
            if not shard.loaded:
                continue
            listed = [(g, "classic") for g in shard.core.list_groups()
                      if g.group_id not in shard.consumer.groups]
            listed += [(ListedGroup(g.group_id, "consumer", g.state), "consumer")
                       for g in shard.consumer.groups.values()]
            listed += [(ListedGroup(g.group_id, "share", g.state), "share") for g in shard.share.groups.values()]
            out += [(g, kind) for g, kind in listed
                    if (not wanted_states or g.state.lower() in wanted_states)
                    and (not wanted_types or kind in wanted_types)]
        return out

    async def delete_groups(self, group_ids: Iterable[str]) -> list[GroupResult]:
        out = []
        for gid in group_ids:
            try:
                shard = self.shard(gid)
                if gid in shard.share.groups:
                    code = await self._run_records(shard, lambda t: shard.share.delete(gid), shard.share.take_records)
                    if code is E.NONE:
                        await self.share_hooks.group_deleted(gid)
                    out.append(GroupResult(gid, code))
                    continue
                if gid in shard.consumer.groups:
                    code = await self._run_consumer(shard, lambda t: shard.consumer.delete(gid))
                    if code is not E.NONE:
                        out.append(GroupResult(gid, code))
                        continue
                    if gid not in shard.core.groups:
                        out.append(GroupResult(gid, E.NONE))
                        continue
                out += await self._run(shard, lambda t: shard.core.delete_groups([gid], t))
            except GroupCoordinatorError as exc:
                out.append(GroupResult(gid, exc.code))
        return out


def _delete_unsubscribed(core: GroupCoordinator, group_id: str, partitions: list[tuple[str, int]],
                         subscribed: frozenset[str], now: int) -> Result[OffsetDeleteResponse]:
    """OffsetDelete for an active KIP-848 group: only topics nobody subscribes to."""
    free = [(t, p) for t, p in partitions if t not in subscribed]
    result = core.delete_offsets(group_id, free, now)
    done = {(r.topic, r.partition): r for r in (result.response.partitions if result.response else ())}
    merged = tuple(done.get((t, p), PartitionResult(t, p, E.GROUP_SUBSCRIBED_TO_TOPIC if t in subscribed
                                                    else E.NONE)) for t, p in partitions)
    return Result(OffsetDeleteResponse(E.NONE, merged), result.records, result.completions, result.ticket)


def _describe_consumer_group(group: ConsumerGroup) -> GroupDescription:
    from .api import DescribedMember
    from .consumer_protocol import ConsumerAssignment, encode_assignment

    members = tuple(
        DescribedMember(m.member_id, m.instance_id, m.client_id, m.client_host, b"",
                        encode_assignment(ConsumerAssignment(tuple(sorted(
                            (t, tuple(sorted(p))) for t, p in m.assigned.items())))))
        for m in group.members.values())
    return GroupDescription(group.group_id, E.NONE, group.state, "consumer", "range" if members else "", members)


def _replay_log(log_: Any, shard: Shard, registry: Any, now: int, source: str) -> int:
    """Replay a whole `__consumer_offsets` partition into the shard's cores (reader thread, under
    the shard lock, so nothing appends meanwhile). Returns the number of records replayed."""
    core, consumer = shard.core, shard.consumer
    topic_names = {topic_uuid(meta): meta.name for meta in registry.list()}.get
    offset, end, count = log_.log_start_offset, log_.log_end_offset, 0
    while offset < end:
        data = log_.read(offset, LOAD_CHUNK_BYTES).to_bytes()
        if not data:
            break
        for batch in iter_batches(data, source=source, allow_partial_tail=True):
            if batch.last_offset < offset:
                continue
            if batch.is_control:
                for record in batch.records():
                    marker = parse_control_record(record)
                    if marker.type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                        core.replay_end_txn(batch.header.producer_id, marker.type is ControlRecordType.COMMIT, now)
            else:
                pid = batch.header.producer_id if batch.is_transactional else NO_PRODUCER_ID
                for record in batch.records():
                    if record.offset < offset:
                        continue
                    try:
                        decoded = decode_record(record.key, record.value)  # UnknownKey: skipped
                        if isinstance(decoded, CoordinatorRecord):
                            if isinstance(decoded.key, ConsumerGroupKey):
                                consumer.replay(decoded, now, topic_names)
                            elif isinstance(decoded.key, ShareGroupKey):
                                shard.share.replay(decoded, now, topic_names)
                            else:
                                core.replay(decoded, now, pid)
                    except Exception as exc:  # one bad record must not make the whole partition unusable
                        log.error("%s offset %d: skipping a record that does not decode: %s", source,
                                  record.offset, exc)
                    count += 1
            offset = batch.next_offset
    return count
