"""What every handler family builds its answers with: kio values (no throttle, the zero id, error
codes, durations), the topic lookups answers need, the partition entries of Metadata and
DescribeTopicPartitions, and config entries for DescribeConfigs and CreateTopics.

Handlers import these from here, never from a sibling handler: each API family's module stays
independent of the others (an import contract in pyproject.toml holds this).
"""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from topiclake.segments.errors import TopiclakeError

from ..config_resources import ConfigEntry, topic_entries
from ..constants import NO_LEADER_EPOCH
from ..context import BrokerContext
from ..leadership import NO_LEADER, Leadership
from ..partitions import topic_uuid
from ..wire import has_field, make, nested

NO_THROTTLE = datetime.timedelta(0)
ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: no topic id


def code(value) -> ErrorCode:
    return ErrorCode(int(value))


def ms(value) -> int:
    """A kio i32Timedelta/i64Timedelta as integer milliseconds (-1 stays -1)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


# ---------------------------------------------------------------------------------- topics
def partition_count(broker: BrokerContext, topic: str) -> int | None:
    try:
        return broker.partitions.topic(topic).partitions
    except TopiclakeError:
        return None


def topic_id_of(broker: BrokerContext, name: str) -> uuid.UUID:
    """The topic's id, or the zero id for a topic that is gone."""
    try:
        return topic_uuid(broker.partitions.topic(name))
    except TopiclakeError:
        return ZERO_UUID


def partition_entries(partition_cls: type, leadership: Leadership, topic: str, indexes) -> tuple:
    """Metadata/DescribeTopicPartitions entries (`PartitionLeader`): the storage is shared, so the
    replicas are the brokers that should lead the partition, preferred first, the ISR the live
    ones and the offline replicas the others; a broker alone is its partitions' only replica.
    LEADER_NOT_AVAILABLE while a partition has no live leader."""
    out = []
    for i in indexes:
        current = leadership.leader(topic, i)
        if current is None:
            out.append(make(partition_cls, error_code=ErrorCode.leader_not_available, partition_index=i,
                            leader_id=NO_LEADER, leader_epoch=NO_LEADER_EPOCH, replica_nodes=(), isr_nodes=(),
                            eligible_leader_replicas=(), last_known_elr=(), offline_replicas=()))
            continue
        led = current.leader != NO_LEADER
        replicas = current.replicas or ((current.leader,) if led else ())
        isr = current.isr if current.replicas else replicas
        out.append(make(partition_cls, error_code=ErrorCode.none if led else ErrorCode.leader_not_available,
                        partition_index=i, leader_id=current.leader, leader_epoch=current.epoch,
                        replica_nodes=replicas, isr_nodes=isr, eligible_leader_replicas=(), last_known_elr=(),
                        offline_replicas=current.offline))
    return tuple(out)


# --------------------------------------------------------------------------------- configs
def config_entries(entries: list[ConfigEntry], entry_cls: type, *, with_documentation: bool = False) -> tuple:
    """Response entries of `entry_cls` (any DescribeConfigs/CreateTopics version)."""
    synonym_cls = nested(entry_cls, "synonyms") if has_field(entry_cls, "synonyms") else None
    return tuple(make(entry_cls, name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                      is_default=e.is_default, is_sensitive=e.sensitive, config_type=e.config_type,
                      documentation=e.documentation if with_documentation else None,
                      synonyms=tuple(make(synonym_cls, name=s.name, value=s.value, source=s.source)
                                     for s in e.synonyms) if synonym_cls else ())
                 for e in entries)


def topic_config_entries(overrides, defaults, entry_cls: type) -> tuple:
    """A new topic's configs for CreateTopics v5+ (no synonyms there)."""
    return config_entries(topic_entries(overrides, defaults), entry_cls)
