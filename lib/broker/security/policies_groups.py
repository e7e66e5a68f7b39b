"""Which operations the group and transaction APIs need (KafkaApis):
- membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat) READ on the
  group, and DESCRIBE on every subscribed topic for ConsumerGroupHeartbeat;
- OffsetCommit READ on the group and READ on each topic; OffsetFetch DESCRIBE on the group and
  each topic (all topics: the ones it may describe); OffsetDelete DELETE on the group, READ on
  each topic; DeleteGroups DELETE; DescribeGroups/ConsumerGroupDescribe DESCRIBE; ListGroups all
  groups with DESCRIBE on the cluster, else the groups it may describe; FindCoordinator DESCRIBE
  on the group or transactional id;
- InitProducerId WRITE on the transactional id, or for an idempotent producer IDEMPOTENT_WRITE on
  the cluster or WRITE on some topic; AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
  TxnOffsetCommit WRITE on the transactional id (and WRITE on each topic, READ on the group and
  its topics); DescribeTransactions/ListTransactions DESCRIBE on the transactional id.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from topiclake.security.acls import Operation as Op
from topiclake.security.acls import ResourceType

from ..api_keys import ApiKey
from ..constants import AUTHORIZED_OPERATIONS_OMITTED, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, CoordinatorType
from ..wire import has_field, make, nested
from .policies import (CLUSTER_DENIED, GROUP_DENIED, NO_INTERVAL, TOPIC_DENIED, TXN_DENIED, blank, policy, replace,
                       serve_allowed, split, topic_key)

_NO_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.timezone.utc)  # Kafka's -1 ms


# ============================================================ classic membership
@policy(ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP)
async def membership(check, broker, request, call):
    body, cls = request.body, request.response_type
    if check.group(Op.READ, body.group_id):
        return await call(body)
    values = {"member_id": body.member_id} if has_field(cls, "member_id") and hasattr(body, "member_id") else {}
    if has_field(cls, "protocol_name") and request.api_key == ApiKey.JOIN_GROUP and request.api_version < 7:
        values["protocol_name"] = ""
    return blank(cls, GROUP_DENIED, **values)


@policy(ApiKey.CONSUMER_GROUP_HEARTBEAT)
async def consumer_group_heartbeat(check, broker, request, call):
    body, cls = request.body, request.response_type
    if not check.group(Op.READ, body.group_id):
        return blank(cls, GROUP_DENIED, error_message=f"not authorized to read group {body.group_id}",
                     member_id=None, heartbeat_interval=NO_INTERVAL, assignment=None)
    hidden = sorted(n for n in body.subscribed_topic_names or () if not check.topic(Op.DESCRIBE, n))
    if hidden:
        return blank(cls, TOPIC_DENIED, error_message=f"not authorized to describe topics {', '.join(hidden)}",
                     member_id=None, heartbeat_interval=NO_INTERVAL, assignment=None)
    return await call(body)


# ==================================================================== describing
@policy(ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE)
async def describe_groups(check, broker, request, call):
    body, cls = request.body, request.response_type
    group_cls = nested(cls, "groups")
    ids_field = "groups" if request.api_key == ApiKey.DESCRIBE_GROUPS else "group_ids"
    ids = getattr(body, ids_field)
    kept = tuple(g for g in ids if check.group(Op.DESCRIBE, g))
    denied = tuple(blank(group_cls, GROUP_DENIED, group_id=g, error_message="Authorization failed.",
                         authorized_operations=AUTHORIZED_OPERATIONS_OMITTED) for g in ids if g not in kept)
    if not kept:
        return blank(cls, groups=denied)
    response = await call(replace(body, **{ids_field: kept}))
    groups = response.groups
    if getattr(body, "include_authorized_operations", False):
        groups = tuple(replace(g, authorized_operations=check.operations(ResourceType.GROUP, g.group_id))
                       if g.error_code == ErrorCode.none else g for g in groups)
    return replace(response, groups=groups + denied)


@policy(ApiKey.LIST_GROUPS)
async def list_groups(check, broker, request, call):
    response = await call(request.body)
    if check.cluster(Op.DESCRIBE):
        return response
    return replace(response, groups=tuple(g for g in response.groups if check.group(Op.DESCRIBE, g.group_id)))


@policy(ApiKey.FIND_COORDINATOR)
async def find_coordinator(check, broker, request, call):
    body, cls = request.body, request.response_type
    key_type = getattr(body, "key_type", CoordinatorType.GROUP)

    def allowed(key: str) -> bool:
        if key_type == CoordinatorType.TRANSACTION:
            return check.txn(Op.DESCRIBE, key)
        return check.group(Op.DESCRIBE, key)  # groups and share groups

    code = TXN_DENIED if key_type == CoordinatorType.TRANSACTION else GROUP_DENIED
    if not has_field(type(body), "coordinator_keys"):
        if allowed(body.key):
            return await call(body)
        return blank(cls, code, error_message="Authorization failed.", node_id=-1, host="", port=-1)
    entry_cls = nested(cls, "coordinators")
    kept = tuple(k for k in body.coordinator_keys if allowed(k))
    denied = tuple(make(entry_cls, key=k, node_id=-1, host="", port=-1, error_code=code,
                        error_message="Authorization failed.") for k in body.coordinator_keys if k not in kept)
    return await serve_allowed(call, body, kept, "coordinator_keys", cls, denied, "coordinators")


@policy(ApiKey.DELETE_GROUPS)
async def delete_groups(check, broker, request, call):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "results")
    kept = tuple(g for g in body.groups_names if check.group(Op.DELETE, g))
    denied = tuple(make(result_cls, group_id=g, error_code=GROUP_DENIED) for g in body.groups_names if g not in kept)
    return await serve_allowed(call, body, kept, "groups_names", cls, denied, "results")


# ======================================================================= offsets
def _partition_errors(topic_cls, part_cls, topics, code, parts_of=lambda t: t.partitions,
                      index_of=lambda p: p.partition_index, name_field="name"):
    return tuple(make(topic_cls, **topic_key(t, name_field), partitions=tuple(
        blank(part_cls, code, partition_index=index_of(p), metadata="") for p in parts_of(t))) for t in topics)


@policy(ApiKey.OFFSET_COMMIT)
async def offset_commit(check, broker, request, call):
    return await _commit_by_topic(check, broker, request, call,
                                  ((lambda: check.group(Op.READ, request.body.group_id), GROUP_DENIED),))


@policy(ApiKey.TXN_OFFSET_COMMIT)
async def txn_offset_commit(check, broker, request, call):
    body = request.body
    return await _commit_by_topic(check, broker, request, call,
                                  ((lambda: check.txn(Op.WRITE, body.transactional_id), TXN_DENIED),
                                   (lambda: check.group(Op.READ, body.group_id), GROUP_DENIED)))


async def _commit_by_topic(check, broker, request, call, checks):
    """OffsetCommit's shape: the first of `checks` ((allowed(), code), ...) that fails refuses every
    partition with its code; then each topic needs READ, and only the allowed ones are committed."""
    body, cls = request.body, request.response_type
    for allowed, code in checks:
        if not allowed():
            topic_cls = nested(cls, "topics")
            return blank(cls, topics=_partition_errors(topic_cls, nested(topic_cls, "partitions"), body.topics, code))
    return await _readable_topics(check, broker, request, call)


@policy(ApiKey.OFFSET_DELETE)
async def offset_delete(check, broker, request, call):
    if not check.group(Op.DELETE, request.body.group_id):
        return blank(request.response_type, GROUP_DENIED, topics=())
    return await _readable_topics(check, broker, request, call)


async def _readable_topics(check, broker, request, call):
    """Each topic needs READ: the handler gets the readable ones, the others' partitions answer
    TOPIC_AUTHORIZATION_FAILED."""
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    kept, refused = split(broker, body.topics, lambda n: check.topic(Op.READ, n))
    denied = _partition_errors(topic_cls, nested(topic_cls, "partitions"), refused, TOPIC_DENIED)
    if not kept and refused:
        return blank(cls, topics=denied)
    response = await call(replace(body, topics=kept))
    return replace(response, topics=response.topics + denied) if denied else response


async def _fetch_group(check, broker, group, topic_cls, part_cls, call_group, index_field="partition_indexes"):
    """One group of an OffsetFetch: (error code, topics) with Kafka's checks."""
    if not check.group(Op.DESCRIBE, group.group_id):
        return GROUP_DENIED, ()
    if group.topics is None:  # every topic with offsets: the ones it may describe
        code, topics = await call_group(group)
        return code, tuple(t for t in topics if t.name is None or check.topic(Op.DESCRIBE, t.name))
    kept, refused = split(broker, group.topics, lambda n: check.topic(Op.DESCRIBE, n))
    denied = _partition_errors(topic_cls, part_cls, refused, TOPIC_DENIED,
                               parts_of=lambda t: getattr(t, index_field), index_of=lambda p: p)
    if not kept and refused:
        return ErrorCode.none, denied
    code, topics = await call_group(replace(group, topics=kept))
    return code, topics + denied


@policy(ApiKey.OFFSET_FETCH)
async def offset_fetch(check, broker, request, call):
    body, cls = request.body, request.response_type
    if has_field(type(body), "groups"):  # v8+: one request, several groups
        group_cls = nested(cls, "groups")
        topic_cls = nested(group_cls, "topics")
        part_cls = nested(topic_cls, "partitions")

        async def call_group(group):
            response = await call(replace(body, groups=(group,)))
            return response.groups[0].error_code, response.groups[0].topics

        groups = []
        for g in body.groups:
            code, topics = await _fetch_group(check, broker, g, topic_cls, part_cls, call_group)
            groups.append(make(group_cls, group_id=g.group_id, topics=topics, error_code=code))
        return blank(cls, groups=tuple(groups))
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")

    async def call_single(group):
        response = await call(group)
        return getattr(response, "error_code", ErrorCode.none), response.topics

    code, topics = await _fetch_group(check, broker, body, topic_cls, part_cls, call_single)
    if code == GROUP_DENIED and not has_field(cls, "error_code"):  # v1: every partition carries it
        topics = _partition_errors(topic_cls, part_cls, body.topics or (), GROUP_DENIED,
                                   parts_of=lambda t: t.partition_indexes, index_of=lambda p: p)
    return blank(cls, topics=topics, error_code=code)


# ================================================================== transactions
@policy(ApiKey.INIT_PRODUCER_ID)
async def init_producer_id(check, broker, request, call):
    body, cls = request.body, request.response_type
    if body.transactional_id is not None:
        if not check.txn(Op.WRITE, body.transactional_id):
            return blank(cls, TXN_DENIED)
    elif not (check.cluster(Op.IDEMPOTENT_WRITE) or check.any_of(Op.WRITE, ResourceType.TOPIC)):
        return blank(cls, CLUSTER_DENIED)
    return await call(body)


@policy(ApiKey.ADD_PARTITIONS_TO_TXN)
async def add_partitions_to_txn(check, broker, request, call):
    body, cls = request.body, request.response_type
    if has_field(type(body), "transactions"):  # v4+: the brokers' verification batch
        return await call(body) if check.cluster(Op.CLUSTER_ACTION) else blank(cls, CLUSTER_DENIED)
    topic_cls = nested(cls, "results_by_topic_v3_and_below")
    part_cls = nested(topic_cls, "results_by_partition")
    topics = body.v3_and_below_topics

    def answer(code_of):
        return blank(cls, results_by_topic_v3_and_below=tuple(make(topic_cls, name=t.name, results_by_partition=tuple(
            make(part_cls, partition_index=p, partition_error_code=code_of(t.name)) for p in t.partitions))
            for t in topics))

    if not check.txn(Op.WRITE, body.v3_and_below_transactional_id):
        return answer(lambda _name: TXN_DENIED)
    refused = {t.name for t in topics if not check.topic(Op.WRITE, t.name)}
    if refused:  # Kafka adds none of them: the rest are OPERATION_NOT_ATTEMPTED
        return answer(lambda name: TOPIC_DENIED if name in refused else ErrorCode.operation_not_attempted)
    return await call(body)


@policy(ApiKey.ADD_OFFSETS_TO_TXN)
async def add_offsets_to_txn(check, broker, request, call):
    body, cls = request.body, request.response_type
    if not check.txn(Op.WRITE, body.transactional_id):
        return blank(cls, TXN_DENIED)
    if not check.group(Op.READ, body.group_id):
        return blank(cls, GROUP_DENIED)
    return await call(body)


@policy(ApiKey.END_TXN)
async def end_txn(check, broker, request, call):
    body, cls = request.body, request.response_type
    return await call(body) if check.txn(Op.WRITE, body.transactional_id) else blank(cls, TXN_DENIED)


@policy(ApiKey.DESCRIBE_TRANSACTIONS)
async def describe_transactions(check, broker, request, call):
    body = request.body
    refused = {t for t in body.transactional_ids if not check.txn(Op.DESCRIBE, t)}
    response = await call(body)  # a read: the entries of refused ids are emptied below
    return replace(response, transaction_states=tuple(
        replace(s, error_code=TXN_DENIED, transaction_state="", producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH, topics=(), transaction_timeout=datetime.timedelta(0),
                transaction_start_time=_NO_TIME)
        if s.transactional_id in refused else s for s in response.transaction_states))


@policy(ApiKey.LIST_TRANSACTIONS)
async def list_transactions(check, broker, request, call):
    response = await call(request.body)
    return replace(response, transaction_states=tuple(
        s for s in response.transaction_states if check.txn(Op.DESCRIBE, s.transactional_id)))
