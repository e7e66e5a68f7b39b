"""A response the handler finishes later, while its connection reads on.

A bucket root acknowledges a produce once a flush tick stored its batches (every `flush_ms`).
Handled one request at a time, a connection would get one Produce acknowledged per tick, however
many its client pipelines (librdkafka sends up to five). So the produce handler does its ordered
part at once (the appends, in request order) and returns `Later`, the wait for the store; the
connection reads and appends the next request meanwhile and sends every response in request order
(connection.py). Kafka's SocketServer mutes a channel for the whole request instead; its acks=all
wait is a replication round trip, not a flush tick.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Later:
    response: Awaitable[Any]  # the response once the wait is over

    def then(self, finish: Callable[[Any], Any]) -> "Later":
        """The same wait, its response passed through `finish` (e.g. an authorizer's additions)."""
        async def finished() -> Any:
            return finish(await self.response)
        return Later(finished())
