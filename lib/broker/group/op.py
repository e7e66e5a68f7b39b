"""One coordinator call in progress: the records it emits (applied at once through `replay`, so
the live path and the load path are the same code) and the parked requests it completes."""

from __future__ import annotations

from typing import Any

from topiclake.segments.batch import NO_PRODUCER_ID

from .api import Completion, JoinResponse, Result, SyncResponse
from .records import CoordinatorRecord


class Op:
    def __init__(self, coordinator: Any, now_ms: int):
        self.coordinator = coordinator
        self.now = now_ms
        self.records: list[CoordinatorRecord] = []
        self.completions: list[Completion] = []

    def emit(self, record: CoordinatorRecord, producer_id: int = NO_PRODUCER_ID) -> None:
        """`producer_id` >= 0: a transactional offset commit, pending until its marker."""
        self.records.append(record)
        self.coordinator.replay(record, self.now, producer_id=producer_id)

    def complete(self, ticket: int | None, response: JoinResponse | SyncResponse) -> None:
        if ticket is not None:
            self.completions.append(Completion(ticket, response))

    def result(self, response=None, ticket: int | None = None) -> Result:
        completions = self.completions
        if ticket is not None:
            own = [c for c in completions if c.ticket == ticket]
            if own:
                response = own[0].response
                completions = [c for c in completions if c.ticket != ticket]
        return Result(response, tuple(self.records), tuple(completions), ticket if response is None else None)
