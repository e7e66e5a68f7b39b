"""A response the handler finishes later, while its connection reads on.

A bucket root acknowledges a produce once a flush tick stored its batches (every `flush_ms`).
Handled one request at a time, a connection would get one Produce acknowledged per tick, however
many its client pipelines (librdkafka sends up to five). So the produce handler does its ordered
part at once (the appends, in request order) and returns `Later`, the wait for the store; the
connection reads and appends the next request meanwhile and sends every response in request order
(connection.py). Kafka's SocketServer mutes a channel for the whole request instead; its acks=all
wait is a replication round trip, not a flush tick.

A produce to a directory root (no quota on its client) returns `Later` too, with
`appends_pending`: its appends are queued on the writer thread, in request order, but may not
have run yet. A client spreading records over many partitions sends a small Produce request per
partition (librdkafka), so a connection answering one at a time spent most of each request's time
in the hop to the writer thread and back; now the next request is read, checked and queued while
the writer appends the one before. Only further Produce requests go ahead of such an answer: any
other request waits for it, so it sees the appends (as one handled at a time would).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Later:
    """The connection answers with `finish(outcome)` once `ready` holds the outcome, on the answer's
    turn (request order), from `ready`'s done callback: no task per answer, which was most of a
    small Produce's cost on the event loop. The response must encode to bytes (no file regions):
    it is written without waiting for the socket."""

    ready: asyncio.Future  # the wait: its result is the outcome, its exception the failure
    finish: Callable[[Any], Any]  # the response made of the outcome
    appends_pending: bool = False  # its appends may not have run yet: only Produce requests go ahead of it

    def then(self, finish: Callable[[Any], Any]) -> "Later":
        """The same wait, its response passed through `finish` (e.g. an authorizer's additions)."""
        first = self.finish
        return Later(self.ready, lambda outcome: finish(first(outcome)), self.appends_pending)
