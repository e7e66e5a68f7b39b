"""What the group, share-group and transaction handlers share: the answers they build from a
coordinator's results (heartbeats and describes of KIP-848 and KIP-932 groups, the offsets of a
commit request) and the error code of a transaction coordinator's failure.

Kept here, not in one of those handlers, so that no handler module imports another.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from ..constants import AUTHORIZED_OPERATIONS_OMITTED, NO_LEADER_EPOCH
from ..context import BrokerContext
from ..group.api import CommitOffset
from ..txn.state import TxnError
from ..wire import Request, make, nested
from ._common import NO_THROTTLE, code, topic_id_of

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- heartbeats (KIP-848, KIP-932)
def refused_heartbeat(cls: type, error_code: ErrorCode, message: str):
    """A heartbeat answer (ConsumerGroupHeartbeat, ShareGroupHeartbeat) carrying only an error."""
    return make(cls, throttle_time=NO_THROTTLE, error_code=error_code, error_message=message, member_id=None,
                member_epoch=-1, heartbeat_interval=datetime.timedelta(0), assignment=None)


def heartbeat_answer(broker: BrokerContext, cls: type, resp):
    """The coordinator's heartbeat response on the wire: its assignment's topics as ids."""
    assignment = None
    if resp.assignment is not None:
        assignment_cls = nested(cls, "assignment")
        tp_cls = nested(assignment_cls, "topic_partitions")
        assignment = make(assignment_cls, topic_partitions=tuple(
            make(tp_cls, topic_id=topic_id_of(broker, name), partitions=tuple(sorted(parts)))
            for name, parts in sorted(resp.assignment.items())))
    return make(cls, throttle_time=NO_THROTTLE, error_code=code(resp.error), error_message=resp.error_message,
                member_id=resp.member_id, member_epoch=resp.member_epoch,
                heartbeat_interval=datetime.timedelta(milliseconds=resp.heartbeat_interval_ms), assignment=assignment)


def describe_answer(broker: BrokerContext, cls: type, found, *, assignor: str,
                    missing_message: Callable[[str, Any], str | None],
                    member_fields: Callable[..., dict] = lambda group, member, assignment: {}):
    """A ConsumerGroupDescribe or ShareGroupDescribe answer from the coordinator's
    `(group id, group or None, error)` triples. Members carry the fields both group types have;
    `member_fields(group, member, assignment)` adds a type's own (`assignment(parts)` builds an
    assignment entry); `missing_message(group_id, error)` explains a group that is not there."""
    group_cls = nested(cls, "groups")
    member_cls = nested(group_cls, "members")
    assignment_cls = nested(member_cls, "assignment")
    tp_cls = nested(assignment_cls, "topic_partitions")

    def assignment(parts):
        return make(assignment_cls, topic_partitions=tuple(
            make(tp_cls, topic_id=topic_id_of(broker, name), topic_name=name, partitions=tuple(sorted(ps)))
            for name, ps in sorted(parts.items())))

    groups = []
    for gid, group, error in found:
        if group is None:
            groups.append(make(group_cls, error_code=code(error), error_message=missing_message(gid, error),
                               group_id=gid, group_state="Dead", group_epoch=-1, assignment_epoch=-1,
                               assignor_name="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        members = tuple(make(member_cls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                             client_id=m.client_id, client_host=m.client_host,
                             subscribed_topic_names=m.subscribed_topics, assignment=assignment(m.assigned),
                             **member_fields(group, m, assignment))
                        for m in group.members.values())
        groups.append(make(group_cls, error_code=ErrorCode.none, error_message=None, group_id=gid,
                           group_state=group.state, group_epoch=group.group_epoch,
                           assignment_epoch=group.assignment_epoch, assignor_name=assignor, members=members,
                           authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


# ------------------------------------------------------------------------------------ offsets
def commit_offsets_of(body, keys=None) -> tuple[CommitOffset, ...]:
    """The flat offsets of an OffsetCommit or TxnOffsetCommit request (same topic nesting).
    `keys`: each topic's name (default: its `name`); a topic keyed by an unknown id is left out."""
    keys = keys if keys is not None else [t.name for t in body.topics]
    return tuple(CommitOffset(key, p.partition_index, p.committed_offset, p.committed_metadata,
                              getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH))
                 for key, t in zip(keys, body.topics) if isinstance(key, str) for p in t.partitions)


# ------------------------------------------------------------------------------- transactions
def txn_error(exc: Exception, request: Request[Any], fenced_since: int) -> ErrorCode:
    """The code for a coordinator failure; PRODUCER_FENCED only from version `fenced_since`."""
    if not isinstance(exc, TxnError):
        log.exception("%s from %s failed", type(request.body).__name__, request.client_id)
        return ErrorCode.unknown_server_error
    error = exc.code
    if error == ErrorCode.producer_fenced and request.api_version < fenced_since:
        error = ErrorCode.invalid_producer_epoch
    level = logging.DEBUG if error == ErrorCode.concurrent_transactions else logging.INFO
    log.log(level, "%s v%d from %s: %s (%s)", type(request.body).__name__, request.api_version,
            request.client_id, error.name, exc)
    return error
