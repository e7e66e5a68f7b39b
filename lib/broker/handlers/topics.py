"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): topic files in shared storage.

Each counts the partitions it creates or deletes against the client's controller_mutation_rate
(throttle.py, KIP-599): strict from CreateTopics v6, DeleteTopics v5, CreatePartitions v3 (a topic
over quota fails with THROTTLING_QUOTA_EXCEEDED), permissive before (done, then throttled)."""

from __future__ import annotations

import datetime
import logging

from kio.schema.create_partitions.v3.request import CreatePartitionsRequest
from kio.schema.create_topics.v7.request import CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest
from kio.schema.errors import ErrorCode

from topiclake.segments.config import LogConfig
from topiclake.segments.storage import validate_topic_name

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..errors import BrokerError, error_code, error_message
from ..leadership import Replication
from ..partitions import topic_uuid
from ..wire import Request, make, nested
from ._common import ZERO_UUID, topic_config_entries
from .registry import REGISTRY

log = logging.getLogger(__name__)


class InvalidReplicationFactor(BrokerError):
    code = ErrorCode.invalid_replication_factor


class ThrottlingQuotaExceeded(BrokerError):
    code = ErrorCode.throttling_quota_exceeded


class _Mutations:
    """One request's use of the controller mutation quota; `throttle` is its response's."""

    def __init__(self, broker, request, strict_since: int):
        self.broker, self.client_id, self.user = broker, request.client_id, request.session.user
        self.strict = request.api_version >= strict_since
        self.throttle_ms = 0

    def take(self, partitions: int) -> None:
        done, ms = self.broker.throttle.record_mutations(self.user, self.client_id, partitions, self.strict)
        self.throttle_ms = max(self.throttle_ms, ms)
        if not done:
            raise ThrottlingQuotaExceeded("The throttling quota has been exceeded.")

    @property
    def throttle(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.throttle_ms)


def _replication(broker, topic) -> tuple[int, Replication]:
    """(the partition count, the replicas) of a CreateTopics entry. The storage is shared, so a
    replica holds no copy: a partition's replicas are the live brokers that should lead it,
    preferred first, and a factor is accepted up to the live brokers (-1: the configured default,
    Kafka's default.replication.factor; a broker alone is the only replica)."""
    live = broker.leadership.broker_ids()
    if topic.assignments:
        assignments = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
        _check_assignments(topic.name, assignments, live)
        return len(assignments), Replication(assignments=assignments)
    factor = topic.replication_factor
    if factor == -1:
        factor = broker.config.cluster.default_replication_factor if broker.leadership.clustered else 1
    if factor < 1:
        raise InvalidReplicationFactor(f"topic {topic.name!r}: replication factor must be larger than 0, or -1 "
                                       "to use the default value")
    if factor > len(live):
        raise InvalidReplicationFactor(
            f"topic {topic.name!r}: unable to replicate the partitions {factor} time(s): the target replication "
            f"factor of {factor} cannot be reached because only {len(live)} broker(s) are registered")
    count = broker.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    return count, Replication(factor)


def _check_assignments(name: str, assignments: dict[int, tuple[int, ...]], live: set[int]) -> None:
    """Kafka's rules for a manual assignment: partitions 0..n-1, each with the same number of
    distinct replicas, every one a live broker."""
    def invalid(why: str) -> BrokerError:
        return BrokerError(f"topic {name!r}: {why}", ErrorCode.invalid_replica_assignment)

    if sorted(assignments) != list(range(len(assignments))):
        raise invalid(f"the assignment must name partitions 0 to {len(assignments) - 1}, not {sorted(assignments)}")
    for index, replicas in assignments.items():
        if not replicas or len(set(replicas)) != len(replicas):
            raise invalid(f"partition {index}'s replicas {list(replicas)} are empty or repeat a broker")
        if set(replicas) - live:
            raise invalid(f"partition {index}'s replicas {list(replicas)} name brokers that are not live "
                          f"(live: {sorted(live)})")
    if len({len(r) for r in assignments.values()}) > 1:
        raise invalid("every partition must have the same number of replicas")


@REGISTRY.route(ApiKey.CREATE_TOPICS, (2, 7))
async def create_topics(broker: BrokerContext, request: Request[CreateTopicsRequest]):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "topics")
    config_cls = nested(result_cls, "configs") if "configs" in result_cls.__dataclass_fields__ else None
    mutations = _Mutations(broker, request, strict_since=6)
    results = []
    for topic in body.topics:
        try:
            validate_topic_name(topic.name)
            count, replication = _replication(broker, topic)
            overrides = {c.name: c.value for c in topic.configs}
            if body.validate_only:
                LogConfig.from_properties({**broker.partitions.registry.defaults(), **overrides})
                if broker.partitions.registry.exists(topic.name):
                    raise BrokerError(f"Topic '{topic.name}' already exists.", ErrorCode.topic_already_exists)
                if count < 1:
                    raise BrokerError(f"topic {topic.name!r}: {count} partitions", ErrorCode.invalid_partitions)
                meta = None
            else:
                if not broker.partitions.registry.exists(topic.name):
                    mutations.take(count)
                meta = broker.partitions.create_topic(topic.name, count, overrides, replication)
                log.info("created topic %s (%d partitions, config %s)", meta.name, meta.partitions, dict(meta.config))
        except Exception as exc:
            results.append(make(result_cls, name=topic.name, topic_id=ZERO_UUID, error_code=error_code(exc),
                                error_message=error_message(exc), configs=()))
            continue
        configs = topic_config_entries(meta.config if meta else overrides, broker.partitions.registry.defaults(),
                                       config_cls) if config_cls else ()
        results.append(make(result_cls, name=topic.name, topic_id=topic_uuid(meta) if meta else ZERO_UUID,
                            error_code=ErrorCode.none, error_message=None, num_partitions=count,
                            replication_factor=_factor(replication), configs=configs))
    return make(cls, throttle_time=mutations.throttle, topics=tuple(results))


def _factor(replication: Replication) -> int:
    if replication.assignments:
        return len(next(iter(replication.assignments.values())))
    return replication.factor


@REGISTRY.route(ApiKey.DELETE_TOPICS, (1, 6))
async def delete_topics(broker: BrokerContext, request: Request[DeleteTopicsRequest]):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "responses")
    # v0-5 send names; v6 sends (name or topic id) states.
    wanted = body.topic_names if hasattr(body, "topic_names") else body.topics
    mutations = _Mutations(broker, request, strict_since=5)
    results = []
    for item in wanted:
        name = item if isinstance(item, str) else item.name
        topic_id = ZERO_UUID if isinstance(item, str) else item.topic_id
        try:
            if name is None:
                meta = broker.partitions.topic_by_id(topic_id)
                if meta is None:
                    raise BrokerError(f"unknown topic id {topic_id}", ErrorCode.unknown_topic_id)
                name = meta.name
            mutations.take(broker.partitions.topic(name).partitions)
            meta = await broker.partitions.delete_topic(name)
            log.info("deleted topic %s", name)
            results.append(make(result_cls, name=name, topic_id=topic_uuid(meta), error_code=ErrorCode.none,
                                error_message=None))
        except Exception as exc:
            results.append(make(result_cls, name=name, topic_id=topic_id, error_code=error_code(exc),
                                error_message=error_message(exc)))
    return make(cls, throttle_time=mutations.throttle, responses=tuple(results))


@REGISTRY.route(ApiKey.CREATE_PARTITIONS, (0, 3))
async def create_partitions(broker: BrokerContext, request: Request[CreatePartitionsRequest]):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "results")
    mutations = _Mutations(broker, request, strict_since=3)
    results = []
    for topic in body.topics:
        try:
            meta = broker.partitions.topic(topic.name, fresh=True)
            if topic.count <= meta.partitions:
                raise BrokerError(f"topic {topic.name!r} has {meta.partitions} partitions; "
                                  f"{topic.count} would not increase the count", ErrorCode.invalid_partitions)
            if not body.validate_only:
                mutations.take(topic.count - meta.partitions)
                meta = broker.partitions.add_partitions(topic.name, topic.count)
                log.info("topic %s now has %d partitions", topic.name, meta.partitions)
            results.append(make(result_cls, name=topic.name, error_code=ErrorCode.none, error_message=None))
        except Exception as exc:
            results.append(make(result_cls, name=topic.name, error_code=error_code(exc),
                                error_message=error_message(exc)))
    return make(cls, throttle_time=mutations.throttle, results=tuple(results))
