"""Which operations the share-group APIs need (KIP-932, KafkaApis):
- ShareGroupHeartbeat READ on the group, DESCRIBE on every subscribed topic;
- ShareGroupDescribe DESCRIBE on each group;
- ShareFetch and ShareAcknowledge READ on the group and READ on each topic (a refused topic's
  partitions answer TOPIC_AUTHORIZATION_FAILED, the others are served);
- DescribeShareGroupOffsets DESCRIBE on the group and each topic (a refused topic's partitions
  answer TOPIC_AUTHORIZATION_FAILED, the others are described); AlterShareGroupOffsets READ on
  the group and each topic; DeleteShareGroupOffsets DELETE on the group, READ on each topic.

A refused group answers the request's GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from topiclake.security.acls import Operation as Op
from topiclake.security.acls import ResourceType

from ..api_keys import ApiKey
from ..constants import AUTHORIZED_OPERATIONS_OMITTED
from ..wire import make, nested
from .policies import GROUP_DENIED, NO_INTERVAL, NO_TOPIC_ID, TOPIC_DENIED, blank, policy, replace


def _denied(cls, code: ErrorCode, what: str, **values):
    return blank(cls, code, error_message=f"not authorized to {what}", **values)


@policy(ApiKey.SHARE_GROUP_HEARTBEAT)
async def share_group_heartbeat(check, broker, request, call):
    body, cls = request.body, request.response_type
    if not check.group(Op.READ, body.group_id):
        return _denied(cls, GROUP_DENIED, f"read group {body.group_id}", member_id=None,
                       heartbeat_interval=NO_INTERVAL, assignment=None)
    hidden = sorted(n for n in body.subscribed_topic_names or () if not check.topic(Op.DESCRIBE, n))
    if hidden:
        return _denied(cls, TOPIC_DENIED, f"describe topics {', '.join(hidden)}", member_id=None,
                       heartbeat_interval=NO_INTERVAL, assignment=None)
    return await call(body)


@policy(ApiKey.SHARE_GROUP_DESCRIBE)
async def share_group_describe(check, broker, request, call):
    body, cls = request.body, request.response_type
    group_cls = nested(cls, "groups")
    kept = tuple(g for g in body.group_ids if check.group(Op.DESCRIBE, g))
    denied = tuple(blank(group_cls, GROUP_DENIED, group_id=g, error_message="Authorization failed.",
                         authorized_operations=AUTHORIZED_OPERATIONS_OMITTED) for g in body.group_ids if g not in kept)
    if not kept:
        return blank(cls, groups=denied)
    response = await call(replace(body, group_ids=kept))
    groups = response.groups
    if body.include_authorized_operations:
        groups = tuple(replace(g, authorized_operations=check.operations(ResourceType.GROUP, g.group_id))
                       if g.error_code == ErrorCode.none else g for g in groups)
    return replace(response, groups=groups + denied)


@policy(ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
async def share_fetch_and_acknowledge(check, broker, request, call):
    """READ on each topic is the handler's: it asks for every partition of the share session."""
    body, cls = request.body, request.response_type
    if not check.group(Op.READ, body.group_id):
        return _denied(cls, GROUP_DENIED, f"read group {body.group_id}")
    return await call(body)


@policy(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
async def describe_share_group_offsets(check, broker, request, call):
    body, cls = request.body, request.response_type
    group_cls = nested(cls, "groups")
    topic_cls = nested(group_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    answers = []
    for group in body.groups:
        if not check.group(Op.DESCRIBE, group.group_id):
            answers.append(blank(group_cls, GROUP_DENIED, group_id=group.group_id, topics=(),
                                 error_message="Authorization failed."))
            continue
        named = group.topics
        kept = tuple(t for t in named or () if check.topic(Op.DESCRIBE, t.topic_name))
        denied = tuple(make(topic_cls, topic_name=t.topic_name, topic_id=NO_TOPIC_ID,
                            partitions=tuple(blank(part_cls, TOPIC_DENIED, partition_index=p,
                                                   error_message="Authorization failed.") for p in t.partitions))
                       for t in named or () if t not in kept)
        if named and not kept:
            answers.append(blank(group_cls, group_id=group.group_id, topics=denied))
            continue
        response = await call(replace(body, groups=(replace(group, topics=kept if named is not None else None),)))
        for answer in response.groups:  # every topic (none named): only those it may describe
            refused = denied if answer.error_code == ErrorCode.none else ()
            answers.append(replace(answer, topics=tuple(t for t in answer.topics or ()
                                                        if check.topic(Op.DESCRIBE, t.topic_name)) + refused))
    return blank(cls, groups=tuple(answers))


@policy(ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS)
async def alter_or_delete_share_group_offsets(check, broker, request, call):
    body, cls = request.body, request.response_type
    operation = Op.READ if request.api_key == ApiKey.ALTER_SHARE_GROUP_OFFSETS else Op.DELETE
    if not check.group(operation, body.group_id):
        return _denied(cls, GROUP_DENIED, f"{operation.name.lower()} group {body.group_id}", responses=())
    if any(not check.topic(Op.READ, t.topic_name) for t in body.topics or ()):
        return _denied(cls, TOPIC_DENIED, "read every topic of the request", responses=())
    return await call(body)
