"""Which operations the topic APIs need (KafkaApis): Produce WRITE (and the transactional id's
WRITE for a transactional producer), Fetch READ and OffsetForLeaderEpoch DESCRIBE (both
CLUSTER_ACTION for a follower), ListOffsets, Metadata and DescribeTopicPartitions DESCRIBE
(auto-creation: CREATE on the cluster or the topic), DeleteRecords and DeleteTopics DELETE,
CreateTopics CREATE (cluster or topic), CreatePartitions ALTER, DescribeProducers READ. Refused
topics answer TOPIC_AUTHORIZATION_FAILED beside the handler's results for the rest; a list of all
topics leaves out what the principal may not describe."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from topiclake.security.acls import Operation as Op
from topiclake.security.acls import ResourceType

from ..api_keys import ApiKey
from ..constants import AUTHORIZED_OPERATIONS_OMITTED
from ..errors import CloseConnection
from ..fetch_sessions import authorizing, in_session, is_incremental, names_a_session
from ..wire import has_field, make, nested
from .policies import NO_TOPIC_ID, TOPIC_DENIED, blank, policy, replace, serve_allowed, split, topic_key, topic_name

# ========================================================================= Produce
@policy(ApiKey.PRODUCE)
async def produce(check, broker, request, call):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    if body.transactional_id is not None and not check.txn(Op.WRITE, body.transactional_id):
        kept, refused, code = (), body.topic_data, ErrorCode.transactional_id_authorization_failed
    else:
        kept, refused = split(broker, body.topic_data, lambda n: check.topic(Op.WRITE, n))
        code = TOPIC_DENIED
    if refused and body.acks == 0:
        raise CloseConnection(f"acks=0 produce by {check.principal} refused: not authorized")
    denied = tuple(make(topic_cls, **topic_key(t), partition_responses=tuple(
        blank(part_cls, code, index=p.index) for p in t.partition_data)) for t in refused)
    return await serve_allowed(call, body, kept, "topic_data", cls, denied, "responses")


# =========================================================================== Fetch
def _is_follower(body) -> bool:
    replica = getattr(body, "replica_id", None)
    if replica is None and getattr(body, "replica_state", None) is not None:
        replica = body.replica_state.replica_id
    return replica is not None and replica >= 0


def _split_topics(check, broker, body, consumer_op):
    """(kept, refused) topics: a follower's request needs CLUSTER_ACTION, a consumer's
    `consumer_op` on each topic."""
    if _is_follower(body):
        return (body.topics, ()) if check.cluster(Op.CLUSTER_ACTION) else ((), body.topics)
    return split(broker, body.topics, lambda n: check.topic(consumer_op, n), name_field="topic")


def _reader_check(check, body):
    """The handler's check of a session's topic names: a follower's right is the cluster's
    CLUSTER_ACTION (the same for every topic), a consumer's READ on the topic."""
    if _is_follower(body):
        replicating = check.cluster(Op.CLUSTER_ACTION)
        return lambda _name: replicating
    return lambda name: check.topic(Op.READ, name)


@policy(ApiKey.FETCH)
async def fetch(check, broker, request, call):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    # A KIP-227 session holds every partition its client names, readable or not (Kafka's): the
    # handler adds them all and answers the refused ones on each fetch, checking them with
    # `readable`, so READ granted later reaches a session whose client no longer names them.
    session = in_session(request.api_version, body)
    kept, refused = (body.topics, ()) if session else _split_topics(check, broker, body, Op.READ)
    denied = tuple(make(topic_cls, **topic_key(t, "topic"), partitions=tuple(
        blank(part_cls, TOPIC_DENIED, partition_index=p.partition, records=b"") for p in t.partitions))
        for t in refused)  # empty, not null, records: librdkafka cannot parse a null record set
    with authorizing(_reader_check(check, body)):
        return await serve_allowed(call, body, kept, "topics", cls, denied, "responses",
                                   always_call=is_incremental(request.api_version, body)
                                   or names_a_session(request.api_version, body), session_id=0)


# ===================================================================== ListOffsets
@policy(ApiKey.LIST_OFFSETS)
async def list_offsets(check, broker, request, call):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    kept, refused = split(broker, body.topics, lambda n: check.topic(Op.DESCRIBE, n))
    denied = tuple(make(topic_cls, name=t.name, partitions=tuple(
        blank(part_cls, TOPIC_DENIED, partition_index=p.partition_index) for p in t.partitions)) for t in refused)
    return await serve_allowed(call, body, kept, "topics", cls, denied, "topics")


# ============================================================ OffsetForLeaderEpoch
@policy(ApiKey.OFFSET_FOR_LEADER_EPOCH)
async def offset_for_leader_epoch(check, broker, request, call):
    kept, refused = _split_topics(check, broker, request.body, Op.DESCRIBE)
    topic_cls = nested(request.response_type, "topics")
    denied = tuple(make(topic_cls, topic=t.topic, partitions=tuple(blank(
        nested(topic_cls, "partitions"), TOPIC_DENIED, partition=p.partition) for p in t.partitions)) for t in refused)
    return await serve_allowed(call, request.body, kept, "topics", request.response_type, denied, "topics")


# ======================================================================== Metadata
@policy(ApiKey.METADATA)
async def metadata(check, broker, request, call):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    all_topics = body.topics is None or (request.api_version == 0 and not body.topics)
    denied, wanted = [], set()
    if not all_topics:
        auto_create = broker.config.auto_create_topics and getattr(body, "allow_auto_topic_creation", True)
        may_create = auto_create and check.cluster(Op.CREATE)
        kept = []
        for t in body.topics:
            requested_name = t if isinstance(t, str) else t.name
            name = requested_name if requested_name is not None else topic_name(broker, t)
            if name is None:  # an unknown id: the handler says so
                kept.append(t)
                continue
            ok = check.topic(Op.DESCRIBE, name)
            if ok and auto_create and not may_create and not broker.partitions.registry.exists(name):
                ok = check.topic(Op.CREATE, name)
            if ok:
                kept.append(t)
                wanted.add(name)
            else:
                denied.append(blank(topic_cls, TOPIC_DENIED, name=requested_name,
                                    topic_id=getattr(t, "topic_id", None) or NO_TOPIC_ID, partitions=(),
                                    is_internal=False, topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
        body = replace(body, topics=tuple(kept))
    response = await call(body)
    with_ops = getattr(body, "include_topic_authorized_operations", False)
    topics = []
    for t in response.topics:
        if t.name is not None:
            if all_topics and not check.topic(Op.DESCRIBE, t.name):
                continue  # hidden
            if not all_topics and t.name not in wanted:
                continue  # v0 asked for nothing allowed: its empty list means every topic
        if with_ops and t.name is not None and t.error_code == ErrorCode.none:
            t = replace(t, topic_authorized_operations=check.operations(ResourceType.TOPIC, t.name))
        topics.append(t)
    changes = {"topics": tuple(topics) + tuple(denied)}
    if getattr(body, "include_cluster_authorized_operations", False):
        changes["cluster_authorized_operations"] = check.operations(ResourceType.CLUSTER, "kafka-cluster")
    return replace(response, **changes)


# ========================================================= DescribeTopicPartitions
@policy(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
async def describe_topic_partitions(check, broker, request, call):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    if not body.topics:  # every topic: leave out what may not be described
        response = await call(body)
        return replace(response, topics=tuple(t for t in response.topics if t.name is None
                                               or check.topic(Op.DESCRIBE, t.name)))
    kept, refused = split(broker, body.topics, lambda n: check.topic(Op.DESCRIBE, n))
    denied = tuple(blank(topic_cls, TOPIC_DENIED, name=t.name, topic_id=NO_TOPIC_ID, is_internal=False, partitions=(),
                         topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED) for t in refused)
    return await serve_allowed(call, body, kept, "topics", cls, denied, "topics", next_cursor=None)


# =================================================== DeleteRecords, DescribeProducers
@policy(ApiKey.DELETE_RECORDS)
async def delete_records(check, broker, request, call):
    return await _per_topic_partitions(check, broker, request, call, Op.DELETE, "partitions", "partition_index")


@policy(ApiKey.DESCRIBE_PRODUCERS)
async def describe_producers(check, broker, request, call):
    return await _per_topic_partitions(check, broker, request, call, Op.READ, "partition_indexes", None)


async def _per_topic_partitions(check, broker, request, call, op: Op, parts_field: str, index_field: str | None):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    kept, refused = split(broker, body.topics, lambda n: check.topic(op, n))
    denied = tuple(make(topic_cls, name=t.name, partitions=tuple(
        blank(part_cls, TOPIC_DENIED, partition_index=p if index_field is None else getattr(p, index_field))
        for p in getattr(t, parts_field))) for t in refused)
    return await serve_allowed(call, body, kept, "topics", cls, denied, "topics")


# ==================================================== CreateTopics, CreatePartitions
@policy(ApiKey.CREATE_TOPICS)
async def create_topics(check, broker, request, call):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "topics")
    cluster_create = check.cluster(Op.CREATE)
    kept, refused = split(broker, body.topics, lambda n: cluster_create or check.topic(Op.CREATE, n))
    denied = tuple(blank(result_cls, TOPIC_DENIED, name=t.name, topic_id=NO_TOPIC_ID, configs=None,
                         error_message="Authorization failed.", topic_config_error_code=0) for t in refused)
    if not kept:
        return blank(cls, topics=denied)
    response = await call(replace(body, topics=kept))
    results = []
    for r in response.topics:  # the created topic's configs only for who may describe them
        if has_field(result_cls, "configs") and r.error_code == ErrorCode.none and \
                not check.topic(Op.DESCRIBE_CONFIGS, r.name):
            r = replace(r, configs=None, topic_config_error_code=int(TOPIC_DENIED))
        results.append(r)
    return replace(response, topics=tuple(results) + denied)


@policy(ApiKey.CREATE_PARTITIONS)
async def create_partitions(check, broker, request, call):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "results")
    kept, refused = split(broker, body.topics, lambda n: check.topic(Op.ALTER, n))
    denied = tuple(blank(result_cls, TOPIC_DENIED, name=t.name, error_message="Authorization failed.")
                   for t in refused)
    return await serve_allowed(call, body, kept, "topics", cls, denied, "results")


# ==================================================================== DeleteTopics
@policy(ApiKey.DELETE_TOPICS)
async def delete_topics(check, broker, request, call):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "responses")

    def allowed(name: str) -> bool:
        return check.topic(Op.DELETE, name)

    if has_field(type(body), "topic_names"):  # v1-v5: by name
        kept = tuple(n for n in body.topic_names if allowed(n))
        refused = tuple(n for n in body.topic_names if not allowed(n))
        denied = tuple(blank(result_cls, TOPIC_DENIED, name=n, error_message="Authorization failed.")
                       for n in refused)
        narrowed = replace(body, topic_names=kept)
    else:
        kept, refused = split(broker, body.topics, allowed)
        denied = tuple(blank(result_cls, TOPIC_DENIED, name=t.name, topic_id=t.topic_id or NO_TOPIC_ID,
                             error_message="Authorization failed.") for t in refused)
        narrowed = replace(body, topics=kept)
    if not kept:
        return blank(cls, responses=denied)
    response = await call(narrowed)
    return replace(response, responses=response.responses + denied)
