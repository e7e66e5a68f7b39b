"""Share groups on this broker (KIP-932): what the handlers call besides the group coordinator.

It owns the share coordinator's state (`state_store.ShareStateStore`, `__share_group_state`),
the persister that reaches any share-partition's state (`persister.SharePersister`: that store,
or in a cluster the broker leading the key's state partition) and the share-partitions
(`fetcher.ShareFetcher`), and it is the group coordinator's `share_hooks`: a member that times
out gives its records back and loses its share session (one that leaves closes its session
itself); a deleted share group loses its share-partition state. The share-group offset APIs
(DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) live here too; in a
cluster their state is the share coordinators' and a lag needs the high watermark of the
partition's leader (ListOffsets).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v9 import request as list_offsets_req

from topiclake.segments.read_constants import CONSUMER_REPLICA_ID, LATEST_TIMESTAMP, IsolationLevel

from ..errors import BrokerError, NotLeaderOrFollower
from ..group.coordinator import GroupCoordinator, ShareHooks
from ..group.errors import GroupErrorCode as E
from ..partitions import topic_uuid
from ..group.share_config import ShareConfig
from .fetcher import ShareFetcher
from .persister import SharePersister
from .state_records import ShareStateKey
from .state_store import ShareStateStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PartitionOffset:
    partition: int
    start_offset: int = -1
    lag: int = -1
    error: E = E.NONE
    message: str | None = None


@dataclass(slots=True)
class TopicOffsets:
    topic: str
    topic_id: Any  # uuid.UUID | None
    partitions: list[PartitionOffset] = field(default_factory=list)
    error: E = E.NONE
    message: str | None = None


class ShareService(ShareHooks):
    def __init__(self, partitions: Any, groups: GroupCoordinator, config: ShareConfig = ShareConfig(), *,
                 shutting_down: asyncio.Event | None = None):
        self.partitions = partitions
        self.groups = groups
        self.config = config
        self.store = ShareStateStore(partitions, config)
        self.persister = SharePersister(self.store)
        self.fetcher = ShareFetcher(partitions, self.store, groups.configs, config, persister=self.persister,
                                    shutting_down=shutting_down)
        groups.share_hooks = self

    async def start(self) -> None:
        await self.store.start()
        await self.fetcher.start()

    async def stop(self) -> None:
        await self.fetcher.stop()
        await self.store.stop()
        if self.persister.peers is not None:
            self.persister.peers.close()

    # ============================================================== group hooks
    async def member_removed(self, group_id: str, member_id: str) -> None:
        self.fetcher.sessions.close(group_id, member_id)
        await self.fetcher.release_member(group_id, member_id)

    async def group_deleted(self, group_id: str, initialized: Mapping[str, Iterable[int]]) -> None:
        for session in self.fetcher.sessions.of_group(group_id):
            self.fetcher.sessions.close(group_id, session.member_id)
        await self.fetcher.delete_state(self._state_keys(group_id, initialized))

    def _state_keys(self, group_id: str, initialized: Mapping[str, Iterable[int]]) -> list[ShareStateKey]:
        """The group's share-partitions that have state: alone, those the store holds; in a
        cluster (the state is spread over the brokers), those the group initialized, as Kafka's
        group coordinator deletes them."""
        if not self.persister.clustered:
            return self.store.keys(group_id)
        keys = []
        for topic, partitions in sorted(initialized.items()):
            try:
                tid = topic_uuid(self.partitions.topic(topic))
            except Exception:  # noqa: BLE001,S112 - deleted since: forget_deleted_topics removes its state
                continue
            keys += [ShareStateKey(group_id, tid, p) for p in sorted(partitions)]
        return keys

    # ================================================================ offsets
    def _share_group(self, group_id: str):
        [(_gid, group, error)] = self.groups.share_groups([group_id])
        return group, error

    def _partition_count(self, topic: str) -> tuple[Any, int]:
        meta = self.partitions.topic(topic)
        return meta, meta.partitions

    async def describe_offsets(self, group_id: str,
                               topics: Mapping[str, Iterable[int]] | None) -> tuple[E, str | None, list[TopicOffsets]]:
        """DescribeShareGroupOffsets: each partition's start offset (-1: no state yet) and lag.
        `topics` None: every partition the group has state for."""
        group, error = self._share_group(group_id)
        if group is None:
            return error, f"Group {group_id} is not a share group." if error is E.GROUP_ID_NOT_FOUND else None, []
        if topics is None:
            topics = {t: sorted(ps) for t, ps in group.initialized.items()}
        out = []
        for topic, partitions in sorted(topics.items()):
            try:
                meta, count = self._partition_count(topic)
            except Exception:  # noqa: BLE001 - no such topic: answered per partition
                out.append(TopicOffsets(topic, None, [PartitionOffset(p, error=E.UNKNOWN_TOPIC_OR_PARTITION,
                                                                      message=f"unknown topic {topic}")
                                                      for p in partitions]))
                continue
            tid, entry = topic_uuid(meta), TopicOffsets(topic, topic_uuid(meta))
            for p in partitions:
                if not 0 <= p < count:
                    entry.partitions.append(PartitionOffset(p, error=E.UNKNOWN_TOPIC_OR_PARTITION,
                                                            message=f"{topic} has no partition {p}"))
                    continue
                try:
                    start, complete = await self.fetcher.start_offset(ShareStateKey(group_id, tid, p))
                except BrokerError as exc:  # its share coordinator cannot be reached now
                    entry.partitions.append(PartitionOffset(p, error=_group_code(exc), message=str(exc)))
                    continue
                lag = -1
                if start >= 0:
                    high_watermark = await self._high_watermark(topic, p)
                    if high_watermark >= 0:
                        lag = max(high_watermark - start - max(complete, 0), 0)
                entry.partitions.append(PartitionOffset(p, start, lag))
            out.append(entry)
        return E.NONE, None, out

    async def _high_watermark(self, topic: str, partition: int) -> int:
        """The partition's high watermark: here, or (cluster mode) asked of its leader with
        ListOffsets; -1 (the lag unknown) when it cannot be had now."""
        try:
            return (await self.partitions.get(topic, partition)).high_watermark
        except NotLeaderOrFollower:
            if not self.persister.clustered:
                raise
        current = self.persister.leadership.leader(topic, partition)
        if current is None or current.leader < 0:
            return -1
        latest = list_offsets_req.ListOffsetsPartition(partition_index=partition, timestamp=LATEST_TIMESTAMP)
        request = list_offsets_req.ListOffsetsRequest(
            replica_id=CONSUMER_REPLICA_ID, isolation_level=IsolationLevel.READ_UNCOMMITTED,
            topics=(list_offsets_req.ListOffsetsTopic(name=topic, partitions=(latest,)),))
        try:
            response = await self.persister.peers.request(current.leader, request)
        except BrokerError:
            return -1
        [answered] = response.topics[0].partitions
        return answered.offset if answered.error_code == ErrorCode.none else -1

    async def alter_offsets(self, group_id: str,
                            offsets: Mapping[str, Mapping[int, int]]) -> tuple[E, str | None, list[TopicOffsets]]:
        """AlterShareGroupOffsets: only while the group has no members (it is created if new)."""
        group, error = self._share_group(group_id)
        if group is None and error is not E.GROUP_ID_NOT_FOUND:
            return error, None, []
        if group is None and self._other_group(group_id):
            return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", []
        if group is not None and group.members:
            return E.NON_EMPTY_GROUP, f"The group {group_id} has active members.", []
        out = []
        for topic, parts in sorted(offsets.items()):
            try:
                meta, count = self._partition_count(topic)
            except Exception:  # noqa: BLE001 - no such topic: answered per partition
                out.append(TopicOffsets(topic, None, [PartitionOffset(p, error=E.UNKNOWN_TOPIC_OR_PARTITION,
                                                                      message=f"unknown topic {topic}")
                                                      for p in parts]))
                continue
            entry = TopicOffsets(topic, topic_uuid(meta))
            done = []
            for p, offset in sorted(parts.items()):
                if not 0 <= p < count or offset < 0:
                    code = E.UNKNOWN_TOPIC_OR_PARTITION if not 0 <= p < count else E.INVALID_REQUEST
                    entry.partitions.append(PartitionOffset(p, error=code, message=(
                        f"{topic} has no partition {p}" if code is E.UNKNOWN_TOPIC_OR_PARTITION
                        else f"start offset {offset} is negative")))
                    continue
                try:
                    await self.fetcher.alter_start_offset(ShareStateKey(group_id, topic_uuid(meta), p), offset)
                except BrokerError as exc:  # its share coordinator cannot be reached now
                    entry.partitions.append(PartitionOffset(p, error=_group_code(exc), message=str(exc)))
                    continue
                entry.partitions.append(PartitionOffset(p, offset))
                done.append(p)
            if done:
                # awaited before the loop moves on
                await self.groups.run_share(
                    group_id, lambda core, _t: core.mark_initialized(group_id, topic, done))  # noqa: B023
            out.append(entry)
        return E.NONE, None, out

    async def delete_offsets(self, group_id: str, topics: Iterable[str]) -> tuple[E, str | None, list[TopicOffsets]]:
        """DeleteShareGroupOffsets: the group's state of whole topics, while it has no members."""
        group, error = self._share_group(group_id)
        if group is None:
            return error, f"Group {group_id} is not a share group." if error is E.GROUP_ID_NOT_FOUND else None, []
        if group.members:
            return E.NON_EMPTY_GROUP, f"The group {group_id} has active members.", []
        out = []
        for topic in topics:
            try:
                meta, _count = self._partition_count(topic)
            except Exception:  # noqa: BLE001 - no such topic: answered per topic
                out.append(TopicOffsets(topic, None, error=E.UNKNOWN_TOPIC_OR_PARTITION,
                                        message=f"unknown topic {topic}"))
                continue
            tid = topic_uuid(meta)
            keys = self._state_keys(group_id, {topic: group.initialized.get(topic, ())})
            try:
                await self.fetcher.delete_state([k for k in keys if k.topic_id == tid])
            except BrokerError as exc:  # its share coordinator cannot be reached now
                out.append(TopicOffsets(topic, tid, error=_group_code(exc), message=str(exc)))
                continue
            # awaited before the loop moves on
            await self.groups.run_share(group_id, lambda core, _t: core.forget_topics(group_id, [topic]))  # noqa: B023
            out.append(TopicOffsets(topic, tid))
        return E.NONE, None, out

    def _other_group(self, group_id: str) -> bool:
        shard = self.groups.shard(group_id)
        classic = shard.core.groups.get(group_id)
        return group_id in shard.consumer.groups or (classic is not None and bool(classic.members))


def _group_code(exc: BrokerError) -> E:
    """A persister's error as the share-group offset APIs answer it."""
    try:
        return E(int(exc.code))
    except ValueError:
        return E.UNKNOWN_SERVER_ERROR
