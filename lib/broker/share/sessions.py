"""Share sessions (KIP-932's fetch sessions for share groups): which share-partitions a member
fetches from, and the epoch its next ShareFetch/ShareAcknowledge must carry.

Epoch 0 opens a session (replacing one the member had: its locks stay until they expire or are
acknowledged), -1 closes it, any other epoch must be the session's current one and moves it on
(after 2^31-1 comes 1 again). A ShareFetch adds its partitions to the session and removes its
forgotten ones. The cache holds at most `max_sessions` (group.share.max.share.sessions): once
full, a new session is refused with SHARE_SESSION_LIMIT_REACHED, as Kafka does. Sessions end
when their member closes them, leaves the group or times out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

TopicIdPartition = tuple  # (topic id UUID, partition)


class SessionError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
SHARE_SESSION_LIMIT_REACHED = 133
INVALID_REQUEST = 42


@dataclass(eq=False)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # what the next request must carry
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)  # ordered set

    def bump(self) -> None:
        self.epoch = 1 if self.epoch >= MAX_EPOCH else self.epoch + 1


class ShareSessions:
    def __init__(self, max_sessions: int = 2000):
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str) -> tuple[ShareSession, ShareSession | None]:
        """A new session for the member (epoch 0); returns it and the session it replaced."""
        key = (group_id, member_id)
        old = self._sessions.pop(key, None)
        if len(self._sessions) >= self.max_sessions:
            raise SessionError(SHARE_SESSION_LIMIT_REACHED,
                               f"the broker holds its maximum of {self.max_sessions} share sessions")
        session = self._sessions[key] = ShareSession(group_id, member_id)
        return session, old

    def use(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request with `epoch` (> 0) continues: SessionError if there is none or
        the epoch is not the expected one. The caller bumps it once the request is accepted."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise SessionError(SHARE_SESSION_NOT_FOUND, f"no share session for member {member_id} of group {group_id}")
        if epoch != session.epoch:
            raise SessionError(INVALID_SHARE_SESSION_EPOCH,
                               f"share session epoch {epoch} of member {member_id}, expected {session.epoch}")
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for (g, _m), s in self._sessions.items() if g == group_id]

    def __len__(self) -> int:
        return len(self._sessions)
