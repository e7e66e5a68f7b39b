"""The consumer protocol blobs carried inside JoinGroup/SyncGroup and GroupMetadataValue
(`ConsumerProtocolSubscription.json` / `ConsumerProtocolAssignment.json`, never flexible).

Both start with an int16 version. Subscription:
    topics ARRAY[STRING] | userData NULLABLE_BYTES |
    ownedPartitions ARRAY[topic STRING, partitions ARRAY[int32]] (v1+) |
    generationId int32 (v2+, default -1) | rackId NULLABLE_STRING (v3+)
Assignment (v0..v3 share one layout):
    assignedPartitions ARRAY[topic STRING, partitions ARRAY[int32]] | userData NULLABLE_BYTES

Kafka reads a version newer than it knows with its newest layout (new versions only append
fields), so we do the same and ignore what follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .serde import Reader, Writer

PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = field(default=SUBSCRIPTION_VERSION, compare=False)


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    partitions: TopicPartitions
    user_data: bytes | None = None
    version: int = field(default=ASSIGNMENT_VERSION, compare=False)


def _read_topic_partitions(r: Reader, what: str) -> TopicPartitions:
    out = []
    for _ in range(r.array_len(what)):
        topic = r.string("topic")
        out.append((topic, tuple(r.int32("partition") for _ in range(r.array_len("partitions")))))
    return tuple(out)


def _write_topic_partitions(w: Writer, tps: TopicPartitions) -> None:
    w.array_len(len(tps))
    for topic, partitions in tps:
        w.string(topic).array_len(len(partitions))
        for p in partitions:
            w.int32(p)


def _version(r: Reader) -> int:
    version = r.int16("version")
    if version < 0:
        raise r.fail(f"negative version {version}")
    return version


def decode_subscription(data: bytes) -> ConsumerSubscription:
    r = Reader(data, "ConsumerProtocolSubscription")
    version = _version(r)
    topics = tuple(r.string("topic") for _ in range(r.array_len("topics")))
    user_data = r.bytes_("userData", nullable=True)
    owned = _read_topic_partitions(r, "ownedPartitions") if version >= 1 else ()
    generation = r.int32("generationId") if version >= 2 else -1
    rack = r.string("rackId", nullable=True) if version >= 3 else None
    if version <= SUBSCRIPTION_VERSION:
        r.end()
    return ConsumerSubscription(topics, user_data, owned, generation, rack, version)


def encode_subscription(s: ConsumerSubscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    if not 0 <= version <= SUBSCRIPTION_VERSION:
        raise ValueError(f"unsupported subscription version {version}")
    w = Writer().int16(version).array_len(len(s.topics))
    for topic in s.topics:
        w.string(topic)
    w.bytes_(s.user_data)
    if version >= 1:
        _write_topic_partitions(w, s.owned_partitions)
    if version >= 2:
        w.int32(s.generation_id)
    if version >= 3:
        w.string(s.rack_id)
    return w.getvalue()


def decode_assignment(data: bytes) -> ConsumerAssignment:
    r = Reader(data, "ConsumerProtocolAssignment")
    version = _version(r)
    partitions = _read_topic_partitions(r, "assignedPartitions")
    user_data = r.bytes_("userData", nullable=True)
    if version <= ASSIGNMENT_VERSION:
        r.end()
    return ConsumerAssignment(partitions, user_data, version)


def assignment_version_for(subscription: bytes) -> int:
    """The assignment version to answer a subscription with: its own version, as far as we can
    write it (Kafka serializes the assignment in the member's subscription version)."""
    version = int.from_bytes(subscription[:2], "big", signed=True) if len(subscription) >= 2 else 0
    return min(max(version, 0), ASSIGNMENT_VERSION)


def encode_assignment(a: ConsumerAssignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    if not 0 <= version <= ASSIGNMENT_VERSION:
        raise ValueError(f"unsupported assignment version {version}")
    w = Writer().int16(version)
    _write_topic_partitions(w, a.partitions)
    return w.bytes_(a.user_data).getvalue()
