"""What the client raises: one-line errors a tool prints as they are.

`KafkaError` is a broker's answer (an error code, perhaps a message) to one request or one part of
it; `CannotConnect` is a broker that no connection could be opened to (refused, no route, timed
out). A connection lost during a request is Python's own ConnectionError (an OSError), with the
broker's address in its message.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

# The answers that mean "ask again elsewhere or later": metadata or a coordinator moved (a broker
# died, leadership or a group's coordinator partition went to another broker), or a coordinator
# is still loading its state right after it took over. Kafka's admin client retries these too.
RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress, ErrorCode.request_timed_out, ErrorCode.not_controller,
})


class ClientError(Exception):
    """A request the cluster refused or could not answer; the message is one line."""


class KafkaError(ClientError):
    """`what: CODE_NAME[: the broker's message]`."""

    def __init__(self, what: str, code: ErrorCode, message: str | None = None):
        super().__init__(f"{what}: {code.name.upper()}{': ' + message if message else ''}")
        self.code = code

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


class CannotConnect(OSError):
    """No connection to a broker could be opened (its address is in the message)."""


def check(code: ErrorCode, what: str, message: str | None = None) -> None:
    """Raise KafkaError for a non-zero error code."""
    if code.value != 0:
        raise KafkaError(what, code, message)
