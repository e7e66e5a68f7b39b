"""The group coordinator inside the broker: one state machine per `__consumer_offsets` partition,
run by the coordinator runtime (`topiclake.broker.coordinator_runtime`).

A partition's state (`GroupShard`) holds its pure cores: `classic.ClassicGroups` for classic
groups and all offsets, `consumer.ConsumerGroups` for KIP-848 groups, `ShareGroups` for share
groups (KIP-932). Every call is one runtime `write`: "core call -> append its records to the
partition -> answer" under the partition's lock, so no response (nor any earlier parked
JoinGroup/SyncGroup completed by the call) leaves before its records are in the log. A failed
append reloads the partition from its log (the runtime's one recovery path): the state is only
ever what the log says, and every parked request is answered COORDINATOR_NOT_AVAILABLE, which
makes clients rediscover the coordinator and retry.

KIP-848 groups take the same path: after each call the shard takes the records of the groups
it changed (`ConsumerGroups.take_records`, topics as ids of the topic registry) and appends
them before answering. KIP-848's online migration rides on it too (`migration`): a consumer
member joining a classic group converts it first, classic members of a consumer group are
served by `consumer_classic`, and a consumer group left with only classic members is
converted back at the end of the call that made it so, all in the call's one append.
What happens to share groups' records when a member times out or the group is deleted is the
share layer's business (`share_hooks`).

Loading (the runtime's) replays the partition from its start: classic and offset records through
the same `replay` the live path uses (`replay_end_txn` per transaction marker), KIP-848 records
(types 3-8) through `ConsumerGroups.replay`, share-group records (10-15) through
`ShareGroups.replay`, topic ids resolved by the topic registry. Until a partition is loaded its
groups answer COORDINATOR_LOAD_IN_PROGRESS; a partition another broker leads answers
NOT_COORDINATOR. A runtime timer drives session/rebalance deadlines (`tick`) and offset
retention (`expire_offsets`).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from topiclake.segments.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from topiclake.segments.errors import TopiclakeError

from ..clock import SYSTEM, Clock
from ..coordinator_runtime import CoordinatorErrorCode, CoordinatorResult, CoordinatorRuntime, InternalTopic
from ..partitions import INTERNAL_TOPICS, topic_uuid
from .share_config import ShareConfig
from .api import (CommitOffset, GroupDescription, GroupResult, HeartbeatRequest, JoinRequest, JoinResponse,
                  LeaveResponse, ListedGroup, MemberIdentity, OffsetCommitRequest, OffsetDeleteResponse,
                  OffsetFetchResponse, PartitionResult, Result, SyncRequest, SyncResponse)
from . import consumer_classic, migration
from .classic import ClassicGroups
from .config import GroupsConfig
from .consumer import ConsumerGroup, ConsumerGroups, ConsumerHeartbeatRequest, ConsumerHeartbeatResponse
from .errors import GroupCoordinatorError, GroupErrorCode as E
from .group_configs import GroupConfigs
from .offsets import TxnOffsetCommitRequest
from .java import coordinator_partition
from .records import ConsumerGroupKey, CoordinatorRecord, UnknownKey, decode_record
from .share_groups import ShareGroup, ShareGroups, ShareHeartbeatRequest, ShareHeartbeatResponse
from .share_records import ShareGroupKey

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


def _group_error(code: CoordinatorErrorCode, message: str) -> GroupCoordinatorError:
    return GroupCoordinatorError(E(int(code)), message)


@dataclass(eq=False)
class GroupShard:
    """The state of one `__consumer_offsets` partition: the cores of its groups."""

    classic: ClassicGroups
    consumer: ConsumerGroups
    share: ShareGroups
    topic_names: Callable[[uuid.UUID], str | None]  # as the registry knew them when loading began


class ShareHooks:
    """What the share layer does when a share-group member times out or a share group is deleted
    (releases the member's records; deletes the group's share-partition state)."""

    async def member_removed(self, group_id: str, member_id: str) -> None:
        pass

    async def group_deleted(self, group_id: str, initialized: Mapping[str, frozenset[int]]) -> None:
        """`initialized`: the group's partitions with share state, by topic name."""


class GroupCoordinator:
    """The facade handlers call. Methods raise GroupCoordinatorError for whole-request errors
    (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)."""

    replays_writes = False  # the cores apply a call's records themselves (op.Op.emit)

    def __init__(self, partitions: Any, config: GroupsConfig = GroupsConfig(), share: ShareConfig = ShareConfig(),
                 *, clock: Clock = SYSTEM):
        self.partitions = partitions  # the broker's PartitionManager
        self.config = config
        self.share_config = share
        self.configs = GroupConfigs(partitions.layout, config, share)  # GROUP config resources
        self.migration_policy = config.migration_policy()
        self.share_hooks = ShareHooks()
        self.topic = InternalTopic(OFFSETS_TOPIC, config.offsets_topic_partitions, {
            "cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes),
            "compression.type": "producer"})
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(partitions, self, error=_group_error,
                                                                          clock=clock)
        self._next_expiry = 0

    # ============================================== the state machine (coordinator runtime)
    def new_shard(self, index: int) -> GroupShard:
        registry = self.partitions.registry
        return GroupShard(
            ClassicGroups(self.config.classic()),
            ConsumerGroups(self.config.consumer_session_timeout_ms, self.config.consumer_heartbeat_interval_ms,
                           group_timeouts=self._consumer_timeouts,
                           downgrade_enabled=self.migration_policy.downgrade_enabled,
                           topic_names=lambda: [m.name for m in self.partitions.topics()
                                                if m.name not in INTERNAL_TOPICS]),
            ShareGroups(lambda g: int(self.configs.value(g, "share.session.timeout.ms")),
                        lambda g: int(self.configs.value(g, "share.heartbeat.interval.ms")),
                        self.share_config.max_size),
            {topic_uuid(meta): meta.name for meta in registry.list()}.get)

    def decode(self, key: bytes | None, value: bytes | None) -> CoordinatorRecord | None:
        decoded = decode_record(key, value)
        return None if isinstance(decoded, UnknownKey) else decoded  # e.g. streams groups: skipped

    def replay(self, shard: GroupShard, record: CoordinatorRecord, offset: int, producer_id: int, now: int) -> None:
        if isinstance(record.key, ConsumerGroupKey):
            shard.consumer.replay(record, now, shard.topic_names)
        elif isinstance(record.key, ShareGroupKey):
            shard.share.replay(record, now, shard.topic_names)
        else:
            shard.classic.replay(record, now, producer_id)

    def replay_marker(self, shard: GroupShard, producer_id: int, commit: bool, now: int) -> None:
        shard.classic.replay_end_txn(producer_id, commit, now)

    def loaded(self, index: int, shard: GroupShard, count: int) -> None:
        if count:
            log.debug("loaded %s-%d: %d records, %d groups", OFFSETS_TOPIC, index, count, len(shard.classic.groups))

    def unloaded(self, index: int, shard: GroupShard) -> None:
        pass

    def _consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        return self.configs.session_timeout_ms(group_id), self.configs.heartbeat_interval_ms(group_id)

    # ===================================================================== lifecycle
    async def start(self) -> None:
        """Start the timer; if `__consumer_offsets` exists, load every partition in the background
        (otherwise the first group request creates it, as Kafka's FindCoordinator does)."""
        self._next_expiry = self.runtime.clock() + self.config.offsets_retention_check_interval_ms
        self.runtime.every(self.config.tick_interval_ms / 1000, self._tick_all, "the group coordinator's timer")
        self.runtime.open_existing_topic()

    async def stop(self) -> None:
        await self.runtime.stop()

    def ensure_loading(self) -> None:
        """Create `__consumer_offsets` if needed and start loading its partitions (once)."""
        self.runtime.ensure_topic()

    async def _tick_all(self) -> None:
        now = self.runtime.clock()
        expire = now >= self._next_expiry
        if expire:
            self._next_expiry = now + self.config.offsets_retention_check_interval_ms
        for shard in self.runtime.active_shards():
            try:
                await self._tick(shard.index, shard.state, now, expire)
            except GroupCoordinatorError:
                pass  # the append failed and the partition was reloaded, or it moved away
            except Exception:
                log.exception("group timer of %s-%d failed", OFFSETS_TOPIC, shard.index)

    async def _tick(self, index: int, state: GroupShard, now: int, expire: bool) -> None:
        due = [d for d in (state.classic.next_deadline_ms(), state.consumer.next_deadline_ms(),
                           state.share.next_deadline_ms()) if d is not None]
        if not expire and not any(d <= now for d in due):
            return
        removed = await self._run_consumer(index, lambda s, t: s.consumer.tick(t))
        for group_id, member_id in removed:
            log.info("group %s: member %s left (session or revocation timeout)", group_id, member_id)
        for group_id, member_id in await self._run_share(index, lambda s, t: s.share.tick(t)):
            log.info("share group %s: member %s left (session timeout)", group_id, member_id)
            await self.share_hooks.member_removed(group_id, member_id)
        await self._run(index, lambda s, t: s.classic.tick(t))
        if expire:
            # An empty KIP-848 group protects no offsets: they expire, and then the group goes too.
            def expire_offsets(s: GroupShard, t: int) -> Result:
                subs = {gid: topics for gid, topics in s.consumer.subscriptions().items()
                        if s.consumer.groups[gid].members}
                return s.classic.expire_offsets(t, subs)

            await self._run(index, expire_offsets)
            for group_id in await self._run_consumer(index, lambda s, t: _delete_empty_consumer_groups(s)):
                log.info("group %s: empty and without offsets: deleted", group_id)

    # ======================================================================= plumbing
    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(group_id, self.runtime.partition_count)

    def shard(self, group_id: str):
        """The group's loaded partition (CoordinatorShard: `.state` is its GroupShard)."""
        self.ensure_loading()
        return self.runtime.active(self.partition_for(group_id))

    def _state(self, group_id: str) -> GroupShard:
        return self.shard(group_id).state

    async def _run(self, index: int, call: Callable[[GroupShard, int], Result], *,
                   producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> Any:
        """One call of the classic or KIP-848 cores, through the runtime. The records: the call's,
        then those of the KIP-848 groups it changed (`migration.finish`)."""
        def op(s: GroupShard, now: int) -> Result:
            return migration.finish(s.classic, s.consumer, call(s, now), self._topic_id, now)

        return await self.runtime.write(index, op, producer_id=producer_id, producer_epoch=producer_epoch)

    async def _run_consumer(self, index: int, call: Callable[[GroupShard, int], Any]) -> Any:
        """The same for a call of the KIP-848 core, which answers at once."""
        return await self._run(index, lambda s, t: Result(call(s, t)))

    async def _run_share(self, index: int, call: Callable[[GroupShard, int], Any]) -> Any:
        """Share groups: call the core, append what it says changed, answer."""
        return await self.runtime.write(
            index, lambda s, now: CoordinatorResult(call(s, now), s.share.take_records(self._topic_id)))

    def _partition_count(self, topic: str) -> int | None:
        try:
            return self.partitions.topic(topic).partitions
        except TopiclakeError:
            return None

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        try:
            return topic_uuid(self.partitions.topic(topic))
        except TopiclakeError:
            return None

    # ================================================================ classic groups
    # Classic members of a consumer group are served by consumer_classic (KIP-848 migration).
    @staticmethod
    def _not_share_group(state: GroupShard, group_id: str) -> None:
        if group_id in state.share.groups:
            raise GroupCoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL, f"group {group_id} is a share group")

    async def join(self, req: JoinRequest) -> JoinResponse:
        shard = self.shard(req.group_id)
        self._not_share_group(shard.state, req.group_id)
        return await self._run(shard.index, lambda s, t: migration.join(s.classic, s.consumer, req,
                                                                       self._partition_count, t))

    async def sync(self, req: SyncRequest) -> SyncResponse:
        shard = self.shard(req.group_id)
        if req.group_id in shard.state.consumer.groups:
            return await self._run_consumer(shard.index, lambda s, t: consumer_classic.sync(s.consumer, req, t))
        return await self._run(shard.index, lambda s, t: s.classic.sync(req, t))

    async def heartbeat(self, req: HeartbeatRequest) -> E:
        shard = self.shard(req.group_id)
        if req.group_id in shard.state.consumer.groups:
            return await self._run_consumer(shard.index, lambda s, t: consumer_classic.heartbeat(s.consumer, req, t))
        return await self._run(shard.index, lambda s, t: s.classic.heartbeat(req, t))

    async def leave(self, group_id: str, members: Iterable[MemberIdentity]) -> LeaveResponse:
        shard = self.shard(group_id)
        members = tuple(members)
        if group_id in shard.state.consumer.groups:
            return await self._run_consumer(shard.index,
                                            lambda s, t: consumer_classic.leave(s.consumer, group_id, members))
        return await self._run(shard.index, lambda s, t: s.classic.leave(group_id, members, t))

    # ======================================================================= offsets
    async def commit_offsets(self, req: OffsetCommitRequest) -> tuple[PartitionResult, ...]:
        shard = self.shard(req.group_id)
        verdict = shard.state.consumer.validate_offset_commit(req.group_id, req.member_id, req.generation_id)
        if verdict is not None:
            if verdict is not E.NONE:
                return tuple(PartitionResult(o.topic, o.partition, verdict) for o in req.offsets)
            # A KIP-848 member's commit: stored like a standalone one (the epoch was checked above).
            req = OffsetCommitRequest(req.group_id, req.offsets, retention_time_ms=req.retention_time_ms)
        return await self._run(shard.index, lambda s, t: s.classic.commit_offsets(req, t))

    async def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None, *,
                            require_stable: bool = False, member_id: str | None = None,
                            member_epoch: int = -1) -> OffsetFetchResponse:
        state = self._state(group_id)
        if member_id is not None and member_epoch >= 0:
            verdict = state.consumer.validate_offset_commit(group_id, member_id, member_epoch)
            if verdict not in (None, E.NONE):
                return OffsetFetchResponse(verdict)
        return state.classic.fetch_offsets(group_id, None if partitions is None else list(partitions), require_stable)

    async def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> OffsetDeleteResponse:
        shard = self.shard(group_id)
        partitions = list(partitions)
        group = shard.state.consumer.groups.get(group_id)
        if group is not None and group.members:
            subscribed = group.subscribed_topics()
            return await self._run(shard.index, lambda s, t: _delete_unsubscribed(s.classic, group_id, partitions,
                                                                                 subscribed, t))
        return await self._run(shard.index, lambda s, t: s.classic.delete_offsets(group_id, partitions, t))

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
        verdict = shard.state.consumer.validate_offset_commit(group_id, member_id, generation_id, transactional=True)
        if verdict is not None:
            if verdict is not E.NONE:
                return tuple(PartitionResult(o.topic, o.partition, verdict) for o in offsets)
            generation_id, member_id = -1, ""
        req = TxnOffsetCommitRequest(group_id, producer_id, producer_epoch, offsets, generation_id, member_id,
                                     group_instance_id)
        return await self._run(shard.index, lambda s, t: s.classic.commit_transactional_offsets(req, t),
                               producer_id=producer_id, producer_epoch=producer_epoch)

    async def complete_transaction(self, producer_id: int, producer_epoch: int, commit: bool, *,
                                   coordinator_epoch: int = 0, partitions: Iterable[int] | None = None) -> None:
        """Write the COMMIT/ABORT marker of `producer_id` to `__consumer_offsets` partitions and
        materialise (commit) or drop (abort) its pending offsets there. `partitions`: the
        `__consumer_offsets` partitions in the transaction (AddOffsetsToTxn adds
        `partition_for(group)`); None = every partition where this producer has pending offsets.
        Call this instead of writing markers to `__consumer_offsets` yourself."""
        indexes = (sorted(set(partitions)) if partitions is not None else
                   [s.index for s in self.runtime.active_shards()
                    if producer_id in s.state.classic.pending_txn_offsets])
        for index in indexes:
            # The one marker path (markers.write_marker): it also releases this partition's LSO and
            # applies the producer epoch, live; the runtime then replays it into the cores.
            await self.runtime.write_marker(index, producer_id, producer_epoch, commit,
                                            coordinator_epoch=coordinator_epoch)

    # ================================================================ KIP-848 groups
    async def consumer_heartbeat(self, req: ConsumerHeartbeatRequest,
                                 metadata: Callable[[str], int | None]) -> ConsumerHeartbeatResponse:
        shard = self.shard(req.group_id)
        if req.group_id in shard.state.share.groups:
            return ConsumerHeartbeatResponse(E.GROUP_ID_NOT_FOUND, req.member_id or None,
                                             error_message=f"group {req.group_id} is a share group")
        return await self._run(shard.index, lambda s, t: migration.consumer_heartbeat(
            s.classic, s.consumer, req, metadata, self.migration_policy, t))

    def consumer_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ConsumerGroup | None, E]]:
        return self._lookup(group_ids, lambda state: state.consumer.groups)

    def _lookup(self, group_ids: Iterable[str], groups_of: Callable[[GroupShard], dict]) -> list[tuple[str, Any, E]]:
        """(group id, the group in `groups_of(state)` or None, error) for each id."""
        out = []
        for gid in group_ids:
            try:
                state = self._state(gid)
            except GroupCoordinatorError as exc:
                out.append((gid, None, exc.code))
                continue
            group = groups_of(state).get(gid)
            out.append((gid, group, E.NONE if group is not None else E.GROUP_ID_NOT_FOUND))
        return out

    # ============================================================== share groups
    async def share_heartbeat(self, req: ShareHeartbeatRequest,
                              metadata: Callable[[str], int | None]) -> ShareHeartbeatResponse:
        shard = self.shard(req.group_id)
        classic = shard.state.classic.groups.get(req.group_id)
        if req.group_id in shard.state.consumer.groups or (classic is not None and classic.members):
            return ShareHeartbeatResponse(E.GROUP_ID_NOT_FOUND, req.member_id or None,
                                          error_message=f"Group {req.group_id} is not a share group.")
        # A member that leaves closes its share session itself, acknowledging what it holds: its
        # records are not released here (that would race the acknowledgements in flight).
        return await self._run_share(shard.index, lambda s, t: s.share.heartbeat(req, metadata, t, self._topic_id))

    def share_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ShareGroup | None, E]]:
        return self._lookup(group_ids, lambda state: state.share.groups)

    async def run_share(self, group_id: str, call: Callable[[ShareGroups, int], Any]) -> Any:
        """Run `call(share core, now)` on the group's partition and persist what it changed."""
        return await self._run_share(self.shard(group_id).index, lambda s, t: call(s.share, t))

    # ========================================================== describe, list, delete
    def describe(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        out = []
        for gid in group_ids:
            try:
                state = self._state(gid)
            except GroupCoordinatorError as exc:
                out.append(GroupDescription(gid, exc.code, "", "", ""))
                continue
            group = state.consumer.groups.get(gid)
            if group is not None:  # described in classic terms; members carry no blobs
                out.append(_describe_consumer_group(group))
            else:
                out.append(state.classic.describe([gid])[0])
        return out

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[tuple[ListedGroup, str]]:
        """(group, group type "classic" | "consumer" | "share") of every loaded partition."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        out = []
        for shard in self.runtime.active_shards():
            state = shard.state
            listed = [(g, "classic") for g in state.classic.list_groups()
                      if g.group_id not in state.consumer.groups]
            listed += [(ListedGroup(g.group_id, "consumer", g.state), "consumer")
                       for g in state.consumer.groups.values()]
            listed += [(ListedGroup(g.group_id, "share", g.state), "share") for g in state.share.groups.values()]
            out += [(g, kind) for g, kind in listed
                    if (not wanted_states or g.state.lower() in wanted_states)
                    and (not wanted_types or kind in wanted_types)]
        return out

    async def delete_groups(self, group_ids: Iterable[str]) -> list[GroupResult]:
        out = []
        for gid in group_ids:
            try:
                shard = self.shard(gid)
                state = shard.state
                if gid in state.share.groups:
                    initialized = dict(state.share.groups[gid].initialized)
                    # awaited before the loop moves on
                    code = await self._run_share(shard.index, lambda s, t: s.share.delete(gid))  # noqa: B023
                    if code is E.NONE:
                        await self.share_hooks.group_deleted(gid, initialized)
                    out.append(GroupResult(gid, code))
                    continue
                if gid in state.consumer.groups:
                    # awaited before the loop moves on
                    code = await self._run_consumer(shard.index, lambda s, t: s.consumer.delete(gid))  # noqa: B023
                    if code is not E.NONE:
                        out.append(GroupResult(gid, code))
                        continue
                    if gid not in self._state(gid).classic.groups:
                        out.append(GroupResult(gid, E.NONE))
                        continue
                # awaited before the loop moves on
                out += await self._run(shard.index, lambda s, t: s.classic.delete_groups([gid], t))  # noqa: B023
            except GroupCoordinatorError as exc:
                out.append(GroupResult(gid, exc.code))
        return out


def _delete_empty_consumer_groups(state: GroupShard) -> list[str]:
    """Kafka's offset clean-up also deletes a KIP-848 group that is empty and has no offsets left
    (none committed, or all expired)."""
    gone = [gid for gid, group in state.consumer.groups.items()
            if not group.members and gid not in state.classic.groups and not state.classic.has_pending_txn_offsets(gid)]
    for gid in gone:
        state.consumer.delete(gid)
    return gone


def _delete_unsubscribed(core: ClassicGroups, group_id: str, partitions: list[tuple[str, int]],
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
    from topiclake.protocol.consumer_protocol import ConsumerAssignment, encode_assignment

    members = tuple(
        DescribedMember(m.member_id, m.instance_id, m.client_id, m.client_host, b"",
                        encode_assignment(ConsumerAssignment(tuple(sorted(
                            (t, tuple(sorted(p))) for t, p in m.assigned.items())))))
        for m in group.members.values())
    return GroupDescription(group.group_id, E.NONE, group.state, "consumer", "range" if members else "", members)
