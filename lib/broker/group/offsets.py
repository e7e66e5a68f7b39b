"""The offsets half of the group coordinator (Kafka's OffsetMetadataManager), mixed into
`classic.ClassicGroups`: OffsetCommit, OffsetFetch, OffsetDelete, retention, and the
transactional offsets of TxnOffsetCommit.

Transactional offsets (KIP-98): TxnOffsetCommit writes ordinary OffsetCommit records, but in a
transactional batch of the producer. Replaying such a record puts the offset in
`pending_txn_offsets[producer_id]`, invisible to OffsetFetch; the COMMIT/ABORT marker later
written to the same `__consumer_offsets` partition is replayed with `replay_end_txn`, which
materialises or drops them. A pending offset is materialised only if no plain commit of the
same partition came later in the log (Kafka compares record offsets; replay order is log order,
so a counter does the same). Loading the partition replays both, so pending state survives a
restart like everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from topiclake.segments.batch import NO_PRODUCER_ID

from .api import (CommitOffset, FetchedOffset, OffsetCommitRequest, OffsetDeleteResponse, OffsetFetchResponse,
                  PartitionResult, Result)
from .errors import GroupCoordinatorError, GroupErrorCode as E
from .op import Op
from .records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue, group_metadata_record, offset_commit_record
from .state import ClassicGroup, GroupState as S

_Partition = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: tuple[CommitOffset, ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetsMixin:
    """Needs `self.groups: dict[str, ClassicGroup]` and `self.config` (a ClassicGroupSettings)."""

    groups: dict[str, ClassicGroup]

    def _init_offsets(self) -> None:
        self._record_seq = 0  # log order of offset records replayed so far
        self._committed_seq: dict[_Partition, int] = {}
        self.pending_txn_offsets: dict[int, dict[_Partition, tuple[int, OffsetCommitValue]]] = {}

    # ================================================================ replay (live + load)
    def _replay_offset(self, record: CoordinatorRecord, now_ms: int, producer_id: int) -> None:
        key, value = record.key, record.value
        assert isinstance(key, OffsetCommitKey)
        self._record_seq += 1
        where = (key.group, key.topic, key.partition)
        if producer_id != NO_PRODUCER_ID:
            if value is not None:
                self.pending_txn_offsets.setdefault(producer_id, {})[where] = (self._record_seq, value)
            return
        self._committed_seq[where] = self._record_seq
        self._apply_offset(key.group, key.topic, key.partition, value, now_ms)

    def _apply_offset(self, group_id: str, topic: str, partition: int, value: OffsetCommitValue | None,
                      now_ms: int) -> None:
        group = self.groups.get(group_id)
        if value is None:
            if group is not None:
                group.offsets.pop((topic, partition), None)
            return
        if group is None:  # offsets without group metadata: a simple (standalone) group
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp=now_ms)
        group.offsets[(topic, partition)] = value

    def replay_end_txn(self, producer_id: int, commit: bool, now_ms: int) -> None:
        """A COMMIT/ABORT marker of `producer_id` reached this partition (live or at load)."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        if not commit:
            return
        for (group_id, topic, partition), (seq, value) in pending.items():
            if self._committed_seq.get((group_id, topic, partition), -1) < seq:
                self._committed_seq[(group_id, topic, partition)] = seq
                self._apply_offset(group_id, topic, partition, value, now_ms)

    def has_pending_txn_offsets(self, group_id: str, topic: str | None = None, partition: int | None = None) -> bool:
        for pending in self.pending_txn_offsets.values():
            for g, t, p in pending:
                if g == group_id and (topic is None or (t == topic and p == partition)):
                    return True
        return False

    # ===================================================================== OffsetCommit
    def commit_offsets(self, req: OffsetCommitRequest, now_ms: int) -> Result[tuple[PartitionResult, ...]]:
        op = Op(self, now_ms)
        try:
            group = self._validate_commit(req, now_ms)
        except GroupCoordinatorError as exc:
            return op.result(tuple(PartitionResult(o.topic, o.partition, exc.code) for o in req.offsets))
        expire = now_ms + req.retention_time_ms if req.retention_time_ms >= 0 else None
        results = []
        for o in req.offsets:
            metadata = o.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(PartitionResult(o.topic, o.partition, E.OFFSET_METADATA_TOO_LARGE))
                continue
            value = OffsetCommitValue(o.offset, metadata, now_ms, o.leader_epoch, expire)
            op.emit(offset_commit_record(group.group_id, o.topic, o.partition, value))
            results.append(PartitionResult(o.topic, o.partition, E.NONE))
        return op.result(tuple(results))

    def _validate_commit(self, req: OffsetCommitRequest, now_ms: int, *, transactional: bool = False) -> ClassicGroup:
        """Kafka's ClassicGroup.validateOffsetCommit. A transactional commit (TxnOffsetCommit)
        checks the member only when it names one: v0-v2 carry no member id or generation, and
        the transaction's producer epoch fences a zombie instead (KIP-447)."""
        if not req.group_id:
            raise GroupCoordinatorError(E.INVALID_GROUP_ID)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:  # a member of a generation the coordinator never saw
                raise GroupCoordinatorError(E.ILLEGAL_GENERATION)
            # Standalone consumer / admin client: a simple group that only stores offsets.
            group = self.groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp=now_ms)
        if group.state is S.DEAD:
            raise GroupCoordinatorError(E.COORDINATOR_NOT_AVAILABLE)
        if req.generation_id < 0 and group.state is S.EMPTY:
            return group
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            if req.group_instance_id is not None:
                static_id = group.static_member_id(req.group_instance_id)
                if static_id is None:
                    raise GroupCoordinatorError(E.UNKNOWN_MEMBER_ID)
                if static_id != req.member_id:
                    raise GroupCoordinatorError(E.FENCED_INSTANCE_ID)
            member = group.members.get(req.member_id)
            if member is None:
                raise GroupCoordinatorError(E.UNKNOWN_MEMBER_ID)
            if req.generation_id != group.generation:
                raise GroupCoordinatorError(E.ILLEGAL_GENERATION)
            if group.state is S.COMPLETING_REBALANCE and not transactional:
                # Valid member and generation, assignment not yet received: let it retry.
                raise GroupCoordinatorError(E.REBALANCE_IN_PROGRESS)
            member.heartbeat_deadline = now_ms + member.session_timeout_ms
            return group
        if transactional:
            return group
        raise GroupCoordinatorError(E.UNKNOWN_MEMBER_ID)  # no identity, group not Empty

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None,
                      require_stable: bool = False) -> OffsetFetchResponse:
        """Committed offsets of `partitions` (None = all); -1 where nothing is committed.
        With `require_stable` (KIP-447), a partition with a pending transactional offset answers
        UNSTABLE_OFFSET_COMMIT so the consumer retries once the transaction is done."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        wanted = sorted(offsets) if partitions is None else list(partitions)
        out = []
        for topic, partition in wanted:
            v = offsets.get((topic, partition))
            if require_stable and self.has_pending_txn_offsets(group_id, topic, partition):
                out.append(FetchedOffset(topic, partition, -1, error=E.UNSTABLE_OFFSET_COMMIT))
                continue
            out.append(FetchedOffset(topic, partition, -1) if v is None else
                       FetchedOffset(topic, partition, v.offset, v.leader_epoch, v.metadata))
        return OffsetFetchResponse(E.NONE, tuple(out))

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]],
                       now_ms: int) -> Result[OffsetDeleteResponse]:
        op = Op(self, now_ms)
        group = self.groups.get(group_id)
        if group is None or group.state is S.DEAD:
            return op.result(OffsetDeleteResponse(E.GROUP_ID_NOT_FOUND))
        if group.state is not S.EMPTY and group.protocol_type != "consumer":
            return op.result(OffsetDeleteResponse(E.NON_EMPTY_GROUP))
        results = []
        for topic, partition in partitions:
            if group.state is not S.EMPTY and group.is_subscribed_to(topic):
                results.append(PartitionResult(topic, partition, E.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            if (topic, partition) in group.offsets:
                op.emit(offset_commit_record(group_id, topic, partition, None))
            results.append(PartitionResult(topic, partition, E.NONE))
        return op.result(OffsetDeleteResponse(E.NONE, tuple(results)))

    def expire_offsets(self, now_ms: int, active_topics: Mapping[str, frozenset[str]] = {}) -> Result[None]:
        """Kafka's offset retention: tombstones for expired offsets; an Empty group left with
        no offsets is deleted. `active_topics`: group id -> topics whose offsets never expire
        (the subscriptions of KIP-848 groups, which live outside this core)."""
        op = Op(self, now_ms)
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            base, skip_topics = self._expiry_rule(group)
            skip_topics = skip_topics | active_topics.get(group.group_id, frozenset())
            if base is not None:
                for (topic, partition), v in list(group.offsets.items()):
                    if topic in skip_topics:
                        continue
                    expired = (now_ms >= v.expire_timestamp if v.expire_timestamp is not None
                               else now_ms - base(v) >= retention)
                    if expired:
                        op.emit(offset_commit_record(group.group_id, topic, partition, None))
            if (group.state is S.EMPTY and not group.offsets and not group.pending_members
                    and group.group_id not in active_topics and not self.has_pending_txn_offsets(group.group_id)):
                op.emit(group_metadata_record(group.group_id, None))
        return op.result()

    @staticmethod
    def _expiry_rule(group: ClassicGroup):
        """(commit value -> time retention counts from, topics never expired) or (None, _)."""
        if group.protocol_type is None:
            return (lambda v: v.commit_timestamp), frozenset()
        if group.state is S.EMPTY:
            ts = group.state_timestamp
            return (lambda v: v.commit_timestamp if ts is None else ts), frozenset()
        if group.protocol_type == "consumer" and group.subscribed_topics is not None and group.state is S.STABLE:
            return (lambda v: v.commit_timestamp), group.subscribed_topics
        return None, frozenset()

    # ================================================================== TxnOffsetCommit
    def commit_transactional_offsets(self, req: TxnOffsetCommitRequest,
                                     now_ms: int) -> Result[tuple[PartitionResult, ...]]:
        """TxnOffsetCommit: the records must be appended in a transactional batch of
        (req.producer_id, req.producer_epoch); they stay pending until `replay_end_txn`."""
        op = Op(self, now_ms)
        plain = OffsetCommitRequest(req.group_id, req.offsets, req.generation_id, req.member_id,
                                    req.group_instance_id)
        try:
            group = self._validate_commit(plain, now_ms, transactional=True)
        except GroupCoordinatorError as exc:
            return op.result(tuple(PartitionResult(o.topic, o.partition, exc.code) for o in req.offsets))
        results = []
        for o in req.offsets:
            metadata = o.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(PartitionResult(o.topic, o.partition, E.OFFSET_METADATA_TOO_LARGE))
                continue
            value = OffsetCommitValue(o.offset, metadata, now_ms, o.leader_epoch)
            op.emit(offset_commit_record(group.group_id, o.topic, o.partition, value), producer_id=req.producer_id)
            results.append(PartitionResult(o.topic, o.partition, E.NONE))
        return op.result(tuple(results))
