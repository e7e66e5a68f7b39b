"""Pure transaction-coordinator state: Kafka's TransactionMetadata and its transitions.

One `TxnMetadata` per transactional id (frozen; a transition returns a new one). The functions
below decide what a request does to it and raise `TxnError` with the code Kafka's
TransactionCoordinator answers with; they never touch disk or the clock (callers pass `now_ms`).
The coordinator persists what they return to `__transaction_state` and replays it — the same
replay as at load — so the cache only ever holds states that are on disk.

States and the transitions Kafka allows (TransactionState.validPreviousStates):

    Empty             <- Empty, CompleteCommit, CompleteAbort          (InitProducerId: epoch bump)
    Ongoing           <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitions/AddOffsets)
    PrepareCommit     <- Ongoing                                       (EndTxn commit)
    PrepareAbort      <- Ongoing, PrepareEpochFence                    (EndTxn abort, timeout, fencing)
                         Empty, CompleteCommit, CompleteAbort          (transactions v2: abort with no partitions)
    CompleteCommit    <- PrepareCommit                                 (markers written)
    CompleteAbort     <- PrepareAbort                                  (markers written)
    Dead              <- Empty, CompleteCommit, CompleteAbort          (transactional id expired)
    PrepareEpochFence <- Ongoing                                       (never persisted: see fence_abort)
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable

from kio.schema.errors import ErrorCode

from topiclake.segments.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_TIMESTAMP

from ..errors import BrokerError

MAX_EPOCH = 32767  # Short.MAX_VALUE
TV2 = 2  # transaction.version 2 (KIP-890 part 2): EndTxn v5+, an epoch bump per transaction

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    """Kafka's TransactionState with the byte it is stored as (TransactionLogValue.TransactionStatus)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


S = TxnState
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
_COMPLETE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
_PREPARING = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})


class TxnError(BrokerError):
    """A request the coordinator refuses, with Kafka's error code."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message, code)


class IllegalStateTransition(TxnError):
    def __init__(self, message: str):
        super().__init__(ErrorCode.invalid_txn_state, message)


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = NO_TIMESTAMP  # when the current transaction began (first AddPartitions)
    update_ms: int = NO_TIMESTAMP
    prev_producer_id: int = NO_PRODUCER_ID  # v1 tagged fields: the id before a rotation
    next_producer_id: int = NO_PRODUCER_ID
    client_txn_version: int = 0
    # Kafka keeps the epoch before the last coordinator-side bump in memory only, so a producer
    # retrying InitProducerId after a fence is told the current epoch instead of being fenced.
    last_producer_epoch: int = field(default=NO_PRODUCER_EPOCH, compare=False)

    def describe(self) -> str:
        return (f"transactional id {self.transactional_id!r} (producer {self.producer_id} epoch "
                f"{self.producer_epoch}, {self.state.label})")

    @property
    def is_preparing(self) -> bool:
        return self.state in _PREPARING

    def transition(self, state: TxnState, **changes) -> "TxnMetadata":
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateTransition(
                f"{self.describe()}: cannot go from {self.state.label} to {state.label}")
        return dataclasses.replace(self, state=state, **changes)


# ------------------------------------------------------------------------------------ checks

def check_producer(m: TxnMetadata, producer_id: int, producer_epoch: int, what: str) -> None:
    """The request's producer must be the transactional id's current one (Kafka's order:
    id mapping first, then the epoch)."""
    if m.producer_id != producer_id:
        raise TxnError(ErrorCode.invalid_producer_id_mapping,
                       f"{what}: {m.describe()} does not belong to producer {producer_id}")
    if m.producer_epoch != producer_epoch:
        raise TxnError(ErrorCode.producer_fenced,
                       f"{what}: producer {producer_id} epoch {producer_epoch} is fenced by epoch "
                       f"{m.producer_epoch} of {m.transactional_id!r}")


def validate_timeout(transactional_id: str, timeout_ms: int, max_timeout_ms: int) -> None:
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        raise TxnError(ErrorCode.invalid_transaction_timeout,
                       f"transactional id {transactional_id!r}: transaction timeout {timeout_ms} ms is not in "
                       f"(0, transaction.max.timeout.ms={max_timeout_ms}]")


# ------------------------------------------------------------------------------- transitions

@dataclass(frozen=True, slots=True)
class InitOutcome:
    """What InitProducerId does: persist `metadata`, then either answer with its producer id and
    epoch, or (`abort_first`) abort the ongoing transaction and answer CONCURRENT_TRANSACTIONS
    so the client retries once the abort completed."""

    metadata: TxnMetadata
    abort_first: bool = False


def needs_new_producer_id(m: TxnMetadata | None) -> bool:
    """Whether InitProducerId on `m` may allocate a producer id (so the caller fetches one first)."""
    return m is None or m.state is S.DEAD or m.producer_epoch >= MAX_EPOCH - 1


def init_producer_id(m: TxnMetadata | None, transactional_id: str, timeout_ms: int, now_ms: int,
                     new_producer_id: Callable[[], int], expected: tuple[int, int] | None = None) -> InitOutcome:
    """InitProducerId with a transactional id. `expected` = (producer id, epoch) the client
    already holds (KIP-360, v3+), None for a fresh producer."""
    if m is None or m.state is S.DEAD:
        return InitOutcome(TxnMetadata(transactional_id, new_producer_id(), 0, timeout_ms, S.EMPTY,
                                       update_ms=now_ms))
    what = f"InitProducerId for {transactional_id!r}"
    if m.is_preparing:
        raise TxnError(ErrorCode.concurrent_transactions, f"{what}: {m.describe()} is completing a transaction")
    if expected is not None and expected[0] not in (m.producer_id, m.prev_producer_id):
        raise TxnError(ErrorCode.producer_fenced,
                       f"{what}: producer {expected[0]} is not the current producer of {m.describe()}")
    if m.state is S.ONGOING:
        return InitOutcome(fence_abort(m, now_ms), abort_first=True)
    if m.state not in _COMPLETE:
        raise IllegalStateTransition(f"{what}: {m.describe()} cannot take a new producer")
    exhausted = m.producer_epoch >= MAX_EPOCH - 1
    if exhausted and (expected is None or expected[1] == m.producer_epoch):
        # The epoch space is used up: rotate to a new producer id (Kafka's prepareProducerIdRotation).
        return InitOutcome(m.transition(S.EMPTY, producer_id=new_producer_id(), producer_epoch=0,
                                        prev_producer_id=m.producer_id, timeout_ms=timeout_ms,
                                        partitions=frozenset(), start_ms=NO_TIMESTAMP, update_ms=now_ms,
                                        last_producer_epoch=NO_PRODUCER_EPOCH))
    epoch, last = m.producer_epoch + 1, m.producer_epoch
    if expected is not None and expected[1] not in (NO_PRODUCER_EPOCH, m.producer_epoch):
        if expected[1] != m.last_producer_epoch:
            raise TxnError(ErrorCode.producer_fenced,
                           f"{what}: epoch {expected[1]} is fenced by {m.describe()}")
        epoch, last = m.producer_epoch, m.last_producer_epoch  # a retry of the last bump
    return InitOutcome(m.transition(S.EMPTY, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                                    partitions=frozenset(), start_ms=NO_TIMESTAMP, update_ms=now_ms))


def add_partitions(m: TxnMetadata, producer_id: int, producer_epoch: int,
                   partitions: Iterable[TopicPartition], now_ms: int, *, tv2: bool = False) -> TxnMetadata:
    """AddPartitionsToTxn / AddOffsetsToTxn: the transaction is (or becomes) Ongoing with
    these partitions (`tv2`: added by the broker for a transactions-v2 client, which the
    metadata records). Returns `m` itself when nothing changes (no write needed)."""
    what = f"AddPartitionsToTxn for {m.transactional_id!r}"
    check_producer(m, producer_id, producer_epoch, what)
    if m.is_preparing:
        raise TxnError(ErrorCode.concurrent_transactions, f"{what}: {m.describe()} is completing a transaction")
    wanted = frozenset(partitions)
    if m.state is S.ONGOING and wanted <= m.partitions:
        return m
    start = m.start_ms if m.state is S.ONGOING else now_ms
    version = TV2 if tv2 else m.client_txn_version
    return m.transition(S.ONGOING, partitions=m.partitions | wanted, start_ms=start, update_ms=now_ms,
                        client_txn_version=version)


@dataclass(frozen=True, slots=True)
class EndOutcome:
    """EndTxn: persist `metadata` (PrepareCommit/PrepareAbort) and write the markers, or nothing
    to do (`metadata is None`: a retry of a transaction that already completed that way).
    `producer`: the producer id and epoch EndTxn v5+ answers with (transactions v2)."""

    metadata: TxnMetadata | None
    producer: tuple[int, int] = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)


def end_transaction(m: TxnMetadata, producer_id: int, producer_epoch: int, commit: bool,
                    now_ms: int) -> EndOutcome:
    word = "commit" if commit else "abort"
    what = f"EndTxn ({word}) for {m.transactional_id!r}"
    check_producer(m, producer_id, producer_epoch, what)
    if m.state is S.ONGOING:
        return EndOutcome(m.transition(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, update_ms=now_ms))
    same = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
    if m.state is same:
        return EndOutcome(None)
    if m.state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
        raise TxnError(ErrorCode.concurrent_transactions, f"{what}: {m.describe()} is still writing markers")
    raise IllegalStateTransition(f"{what}: {m.describe()} has no transaction to {word}")


def needs_new_producer_id_to_end(m: TxnMetadata) -> bool:
    """Whether a transactions-v2 EndTxn on `m` may rotate the producer id (its epoch is used up)."""
    return m.producer_epoch >= MAX_EPOCH - 1


def end_transaction_v2(m: TxnMetadata, producer_id: int, producer_epoch: int, commit: bool, now_ms: int,
                       new_producer_id: Callable[[], int]) -> EndOutcome:
    """EndTxn v5+ (transaction.version 2, Kafka's TransactionCoordinator.endTransaction): every
    transaction ends with an epoch bump, which the markers carry and the response returns, so
    nothing of this transaction can be written once it ended. A used-up epoch rotates to a new
    producer id (epoch 0) when the transaction completes. A retry is recognised by its epoch
    being the one before the bump. An abort needs no ongoing transaction (it still bumps)."""
    word = "commit" if commit else "abort"
    what = f"EndTxn v5 ({word}) for {m.transactional_id!r}"
    retry_on_bump = m.producer_epoch == producer_epoch + 1
    retry_on_overflow = (m.prev_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                         and m.producer_epoch == 0)
    if m.producer_id != producer_id and not retry_on_overflow:
        raise TxnError(ErrorCode.invalid_producer_id_mapping,
                       f"{what}: {m.describe()} does not belong to producer {producer_id}")
    if m.state in (S.ONGOING, S.EMPTY):
        valid = producer_epoch == m.producer_epoch
    elif m.is_preparing:
        valid = retry_on_bump
    else:
        valid = retry_on_bump or retry_on_overflow or producer_epoch == m.producer_epoch
    if not valid:
        raise TxnError(ErrorCode.producer_fenced,
                       f"{what}: producer {producer_id} epoch {producer_epoch} is fenced by {m.describe()}")
    retry = retry_on_bump or retry_on_overflow
    current = EndOutcome(None, (m.producer_id, m.producer_epoch))

    def prepare(state: TxnState, no_partitions: bool) -> EndOutcome:
        next_id = new_producer_id() if needs_new_producer_id_to_end(m) else NO_PRODUCER_ID
        prepared = m.transition(state, producer_epoch=m.producer_epoch + 1, last_producer_epoch=m.producer_epoch,
                                next_producer_id=next_id, client_txn_version=TV2, update_ms=now_ms,
                                start_ms=now_ms if no_partitions else m.start_ms)
        answer = (next_id, 0) if next_id != NO_PRODUCER_ID else (m.producer_id, prepared.producer_epoch)
        return EndOutcome(prepared, answer)

    if m.state is S.ONGOING:
        return prepare(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, False)
    if m.state is S.PREPARE_COMMIT and commit or m.state is S.PREPARE_ABORT and not commit:
        raise TxnError(ErrorCode.concurrent_transactions, f"{what}: {m.describe()} is still writing markers")
    if m.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT) and retry:
        return current
    if not commit and not retry and m.state in _COMPLETE:
        return prepare(S.PREPARE_ABORT, True)
    raise IllegalStateTransition(f"{what}: {m.describe()} has no transaction to {word}")


def fence_abort(m: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Abort an Ongoing transaction on the coordinator's own initiative (timeout, or a new
    producer instance): Kafka goes Ongoing -> PrepareEpochFence (bump the epoch, in memory) ->
    PrepareAbort (persisted). The markers carry the bumped epoch, which fences the old producer at
    every partition of the transaction and at the coordinator."""
    fenced = m.transition(S.PREPARE_EPOCH_FENCE)
    epoch = fenced.producer_epoch + 1 if fenced.producer_epoch < MAX_EPOCH - 1 else fenced.producer_epoch
    return fenced.transition(S.PREPARE_ABORT, producer_epoch=epoch, last_producer_epoch=m.producer_epoch,
                             update_ms=now_ms)


def complete(m: TxnMetadata, now_ms: int) -> TxnMetadata:
    """All markers are written: PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort. A
    transactions-v2 end that used up the epoch moves on to its next producer id, at epoch 0."""
    if m.state not in _PREPARING:
        raise IllegalStateTransition(f"{m.describe()}: no markers are being written")
    changes = {}
    if m.next_producer_id != NO_PRODUCER_ID:
        changes = dict(producer_id=m.next_producer_id, producer_epoch=0, prev_producer_id=m.producer_id,
                       next_producer_id=NO_PRODUCER_ID)
    return m.transition(S.COMPLETE_COMMIT if m.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT,
                        partitions=frozenset(), update_ms=now_ms, **changes)


def is_expired(m: TxnMetadata, now_ms: int) -> bool:
    """An Ongoing transaction older than its timeout (Kafka's timedOutTransactions)."""
    return m.state is S.ONGOING and m.start_ms + m.timeout_ms < now_ms
