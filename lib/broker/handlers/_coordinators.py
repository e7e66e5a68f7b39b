"""What the group, share-group and transaction handlers share: the answers they build from a
coordinator's results (heartbeats of KIP-848 and KIP-932 groups, the offsets of a commit request)
and the error code of a transaction coordinator's failure.

Kept here, not in one of those handlers, so that no handler module imports another.
"""

from __future__ import annotations

import datetime
import logging

from kio.schema.errors import ErrorCode

from ..group.api import CommitOffset
from ..txn.state import TxnError
from ..wire import make, nested
from ._common import NO_THROTTLE, code, topic_id_of

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- heartbeats (KIP-848, KIP-932)
def refused_heartbeat(cls, error_code, message: str):
    """A heartbeat answer (ConsumerGroupHeartbeat, ShareGroupHeartbeat) carrying only an error."""
    return make(cls, throttle_time=NO_THROTTLE, error_code=error_code, error_message=message, member_id=None,
                member_epoch=-1, heartbeat_interval=datetime.timedelta(0), assignment=None)


def heartbeat_answer(broker, cls, resp):
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


# ------------------------------------------------------------------------------------ offsets
def commit_offsets_of(body, keys=None) -> tuple[CommitOffset, ...]:
    """The flat offsets of an OffsetCommit or TxnOffsetCommit request (same topic nesting).
    `keys`: each topic's name (default: its `name`); a topic keyed by an unknown id is left out."""
    keys = keys if keys is not None else [t.name for t in body.topics]
    return tuple(CommitOffset(key, p.partition_index, p.committed_offset, p.committed_metadata,
                              getattr(p, "committed_leader_epoch", -1))
                 for key, t in zip(keys, body.topics) if isinstance(key, str) for p in t.partitions)


# ------------------------------------------------------------------------------- transactions
def txn_error(exc: Exception, request, fenced_since: int) -> ErrorCode:
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
