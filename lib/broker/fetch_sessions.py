"""Incremental fetch sessions (KIP-227): a consumer of many partitions names them all once, then
only the ones whose fetch position changed, and hears back only about partitions with something
new. Kafka's FetchSession.scala, for consumers (no privileged follower sessions here):

- epoch 0 (any session id): a full request; the session it names, if any, is closed and a new
  one is created (epoch 1 next) if the cache has room. epoch -1: a full request, sessionless;
  the session it names is closed.
- epoch n > 0: incremental. Unknown id: FETCH_SESSION_ID_NOT_FOUND; epoch other than the
  session's next: INVALID_FETCH_SESSION_EPOCH; a session created with topic names used with
  topic ids (v13+) or the other way round: FETCH_SESSION_TOPIC_ID_ERROR. Otherwise the request's
  partitions are added or updated, forgotten_topics_data removed, the epoch moves on (after
  2**31 - 1 comes 1), and every partition of the session is read.
- An incremental answer names a partition only if it has records, an error, or a high watermark
  or log start offset other than the one last sent (an error resets the sent high watermark, so
  the partition is named again once the error goes). A partition that returned records moves to
  the session's end, so a max_bytes budget does not starve the later ones.
- The cache holds at most `slots` sessions (max.incremental.fetch.session.cache.slots). When
  full, a new session replaces the least recently used one if that one was idle for
  `eviction_ms` (min.incremental.fetch.session.eviction.ms), else the smallest session older
  than `eviction_ms` if the new one has more partitions; else the answer carries session id 0
  and the client keeps sending full requests.
- The cache holds at most `max_partitions` partitions over all its sessions (not Kafka's: its
  sessions are bounded only by request size). A client naming partitions it never stops naming,
  of topics that need not exist, would grow one otherwise until the broker runs out of memory. A
  full request past the bound evicts sessions idle for `eviction_ms` (least recently used first),
  else gets no session; an incremental one that grows its session past it closes it
  (FETCH_SESSION_ID_NOT_FOUND: the client sends a full request, and reads sessionless).
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from kio.schema.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
DEFAULT_SLOTS = 1000
DEFAULT_EVICTION_MS = 120_000
DEFAULT_MAX_PARTITIONS = 500_000  # about 150 MB of sessions (~300 bytes a partition)

# A session's entry for one partition: [the request's FetchPartition (as last sent), the high
# watermark last answered, the log start offset last answered]. One list per partition, kept
# across requests: nothing per partition is built again for an incremental request.
_REQUEST, _HIGH_WATERMARK, _LOG_START = 0, 1, 2
_UNSENT = -1  # Kafka's INVALID_HIGH_WATERMARK / INVALID_LOG_START_OFFSET: a new partition is always answered


# An authorizer's READ check of topic names, set by the Fetch policy around the handler's call: an
# incremental request names few or none of its session's topics, so the policy cannot filter them
# out of the request as it does a full one's; the handler checks each of the session's topics
# (Kafka re-authorizes every partition of the session on each fetch).
_READABLE: contextvars.ContextVar[Callable[[str], bool] | None] = contextvars.ContextVar(
    "topiclake_fetch_session_readable", default=None)


@contextlib.contextmanager
def authorizing(readable: Callable[[str], bool]) -> Iterator[None]:
    """Within this (the policy's call of the handler, in the same task), a session's topics are read
    only where `readable(name)`; the others are answered TOPIC_AUTHORIZATION_FAILED."""
    token = _READABLE.set(readable)
    try:
        yield
    finally:
        _READABLE.reset(token)


def readable_check() -> Callable[[str], bool] | None:
    """The authorizer's check set by `authorizing`, None without an authorizer."""
    return _READABLE.get()


def in_session(version: int, body: Any) -> bool:
    """A Fetch that creates a session (v7+, epoch 0) or uses one (epoch > 0): every partition it
    names belongs to the session, the ones the client may not read as well (Kafka's), so the
    handler, not the policy, refuses them, on this fetch and every later one."""
    return version >= 7 and getattr(body, "session_epoch", FINAL_EPOCH) != FINAL_EPOCH


def names_a_session(version: int, body: Any) -> bool:
    """A Fetch naming a session (v7+, session id set): the handler must see it even with no topic
    left to serve, to close (epoch -1 or 0) or use it (a Java consumer's close sends no topic)."""
    return version >= 7 and getattr(body, "session_id", INVALID_SESSION_ID) != INVALID_SESSION_ID


def is_incremental(version: int, body: Any) -> bool:
    """A Fetch of an existing session (v7+, epoch > 0): its partitions are the session's."""
    return version >= 7 and getattr(body, "session_epoch", FINAL_EPOCH) not in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSession:
    __slots__ = ("id", "epoch", "by_id", "partitions", "created_ms", "last_used_ms")

    def __init__(self, session_id: int, by_id: bool, partitions: dict, now_ms: float) -> None:
        self.id = session_id
        self.epoch = 1  # the epoch the client's next (incremental) request carries
        self.by_id = by_id  # topics keyed by topic id (v13+), else by name
        self.partitions = partitions  # (topic key, partition index) -> entry, in fetch order
        self.created_ms = now_ms
        self.last_used_ms = now_ms

    def update(self, topics: Iterable[tuple[Any, Iterable[Any]]],
               forgotten: Iterable[tuple[Any, Iterable[int]]]) -> None:
        """Adds or updates the request's partitions, then drops the forgotten ones."""
        parts = self.partitions
        for key, requested in topics:
            for p in requested:
                entry = parts.get((key, p.partition))
                if entry is None:
                    parts[(key, p.partition)] = [p, _UNSENT, _UNSENT]
                else:
                    entry[_REQUEST] = p
        for key, indexes in forgotten:
            for index in indexes:
                parts.pop((key, index), None)

    def answer(self, topics: dict[Any, list[tuple]]) -> dict[Any, list[tuple]]:
        """The rows (fetch_response's) the client has not heard yet; what they say becomes what
        the session last sent. One pass over the rows."""
        parts = self.partitions
        changed: dict[Any, list[tuple]] = {}
        for key, rows in topics.items():
            kept = []
            for row in rows:
                index, error, high_watermark, _stable, log_start, _aborted, records = row
                entry = parts.get((key, index))
                if entry is None:  # forgotten by a request that overtook this one
                    continue
                if records or error or entry[_HIGH_WATERMARK] != high_watermark or entry[_LOG_START] != log_start:
                    kept.append(row)
                    entry[_HIGH_WATERMARK] = _UNSENT if error else high_watermark
                    entry[_LOG_START] = log_start
                    if records:  # to the end: read after the others next time
                        parts[(key, index)] = parts.pop((key, index))
            if kept:
                changed[key] = kept
        return changed


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request is, in session terms: an error (answered with no partitions), a full
    request (sessionless, or `create`: a session to be made of its answer) or an incremental one
    (`session`: read all of it, answer what changed)."""

    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None
    create: bool = False


SESSIONLESS = FetchContext()


class FetchSessionCache:
    """One broker's sessions; used from the event loop only (no locking)."""

    def __init__(self, slots: int = DEFAULT_SLOTS, eviction_ms: int = DEFAULT_EVICTION_MS,
                 clock: Callable[[], float] = time.monotonic, max_partitions: int = DEFAULT_MAX_PARTITIONS) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms
        self.max_partitions = max_partitions
        self._clock = clock
        self._sessions: dict[int, FetchSession] = {}  # least recently used first
        self._held = 0  # partitions over all sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def _now_ms(self) -> float:
        return self._clock() * 1000

    def context(self, session_id: int, epoch: int, by_id: bool, topics: Iterable[tuple[Any, Iterable[Any]]],
                forgotten: Iterable[tuple[Any, Iterable[int]]]) -> FetchContext:
        """The request's context; an incremental request's partitions and forgotten ones are applied
        to its session here, and the session's epoch moves on (as Kafka's newContext does)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._remove(session_id)  # a full request closes the session it names
            if epoch == FINAL_EPOCH or self.slots <= 0:
                return SESSIONLESS
            return FetchContext(create=True)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(ErrorCode.invalid_fetch_session_epoch)
        if session.by_id != by_id:
            return FetchContext(ErrorCode.fetch_session_topic_id_error)
        held_before = len(session.partitions)
        session.update(topics, forgotten)
        self._held += len(session.partitions) - held_before
        if not session.partitions:  # everything forgotten: nothing left to keep
            self._remove(session_id)
            return SESSIONLESS
        if self._held > self.max_partitions:
            self._remove(session_id)
            return FetchContext(ErrorCode.fetch_session_id_not_found)
        session.epoch = 1 if session.epoch >= MAX_EPOCH else session.epoch + 1
        session.last_used_ms = self._now_ms()
        self._sessions[session_id] = self._sessions.pop(session_id)  # most recently used: last
        return FetchContext(session=session)

    def create(self, by_id: bool, topics: Iterable[tuple[Any, Iterable[Any]]]) -> FetchSession | None:
        """A new session of a full request's partitions, or None if the cache has no room for it."""
        parts = {(key, p.partition): [p, _UNSENT, _UNSENT] for key, requested in topics for p in requested}
        now = self._now_ms()
        if not parts or len(parts) > self.max_partitions:
            return None
        # Idle sessions give way to the bound as they do to the slots (least recently used first).
        while self._held + len(parts) > self.max_partitions:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.last_used_ms <= self.eviction_ms:
                return None
            self._remove(oldest.id)
        if len(self._sessions) >= self.slots and not self._evict_for(len(parts), now):
            return None
        session_id = 1 + secrets.randbelow(MAX_EPOCH)
        while session_id in self._sessions:
            session_id = 1 + secrets.randbelow(MAX_EPOCH)
        session = self._sessions[session_id] = FetchSession(session_id, by_id, parts, now)
        self._held += len(parts)
        return session

    def _remove(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._held -= len(session.partitions)

    def _evict_for(self, size: int, now: float) -> bool:
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used_ms > self.eviction_ms:
            self._remove(oldest.id)
            return True
        # Only sessions older than eviction_ms may give way, and only to a bigger one (Kafka's
        # EvictableKey order: size, then id; the new session's id counts as 0).
        mature = [s for s in self._sessions.values() if now - s.created_ms > self.eviction_ms]
        if not mature:
            return False
        smallest = min(mature, key=lambda s: (len(s.partitions), s.id))
        if size <= len(smallest.partitions):
            return False
        self._remove(smallest.id)
        return True
