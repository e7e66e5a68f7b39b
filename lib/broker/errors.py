"""Exceptions -> Kafka error codes.

Handlers raise (or let through) the segment store's exceptions and the few broker-side ones
below; `error_code(exc)` turns each into the code Kafka's broker would answer with, and
`error_message(exc)` the text for responses that carry one. Anything unexpected is
UNKNOWN_SERVER_ERROR for that one partition/topic, never a dead connection or broker.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from topiclake.objectlog.fence import LeaderFenced
from topiclake.objectlog.flush import FlushTimedOut
from topiclake.segments import errors as seg
from topiclake.segments.leader_fence import FencedLeaderError
from topiclake.store.errors import StoreUnavailable


class BrokerError(Exception):
    """An error with a Kafka error code chosen by the broker itself."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str, code: ErrorCode | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class ListenError(seg.TopiclakeError):
    """The broker cannot listen on its host and port (in use, not an address of this machine,
    a host name that does not resolve)."""


class CloseConnection(Exception):
    """Raised by a handler to end the connection without a response (acks=0 produce errors)."""


class UnknownTopicOrPartition(BrokerError):
    code = ErrorCode.unknown_topic_or_partition


class InvalidRequest(BrokerError):
    code = ErrorCode.invalid_request


class OutOfOrderSequence(BrokerError):
    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpoch(BrokerError):
    code = ErrorCode.invalid_producer_epoch


class NotLeaderOrFollower(BrokerError):
    """The partition is led by another broker (or its leadership is moving): the client
    refreshes its metadata and retries there."""

    code = ErrorCode.not_leader_or_follower


class FencedLeaderEpoch(BrokerError):
    """The request names a leader epoch older than this leader's (KIP-320)."""

    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpoch(BrokerError):
    """The request names a leader epoch newer than this broker knows (its metadata is ahead)."""

    code = ErrorCode.unknown_leader_epoch


_BY_TYPE: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (FencedLeaderError, ErrorCode.not_leader_or_follower),  # a newer leader took over the partition
    (LeaderFenced, ErrorCode.not_leader_or_follower),  # the same on a bucket root
    # A bucket root whose store did not take a flush in time (down, slow): retriable.
    (FlushTimedOut, ErrorCode.request_timed_out),
    (StoreUnavailable, ErrorCode.request_timed_out),
    (seg.CorruptRecordError, ErrorCode.corrupt_message),
    # A partition deleted (or the broker stopping) under a request: the answer it always had,
    # from when a closed log raised CorruptRecordError.
    (seg.LogClosedError, ErrorCode.corrupt_message),
    (seg.RecordBatchTooLargeError, ErrorCode.record_list_too_large),  # before its base class
    (seg.RecordTooLargeError, ErrorCode.message_too_large),
    (seg.InvalidTopicError, ErrorCode.invalid_topic_exception),
    (seg.UnknownTopicError, ErrorCode.unknown_topic_or_partition),
    (seg.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (seg.InvalidConfigError, ErrorCode.invalid_config),
    (seg.TopicAlreadyExistsError, ErrorCode.topic_already_exists),
    (seg.InvalidPartitionsError, ErrorCode.invalid_partitions),
)


def error_code(exc: BaseException) -> ErrorCode:
    if isinstance(exc, BrokerError):
        return exc.code
    for kind, code in _BY_TYPE:
        if isinstance(exc, kind):
            return code
    return ErrorCode.unknown_server_error


def error_message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class RequestTimedOut(BrokerError):
    """What was asked was not done within the request's timeout (a bucket root's flush); retriable."""

    code = ErrorCode.request_timed_out
