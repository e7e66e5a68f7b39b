"""Fetch (key 1): whole batches from each requested partition, with the max_wait_ms long poll.

Budget rules (KIP-74): at most `partition_max_bytes` per partition and `max_bytes` in total,
except that the first partition with data returns at least one whole batch even if it is
larger, so a consumer never gets stuck behind a big batch. If fewer than `min_bytes` are ready,
the request parks until an append to one of its partitions, the deadline, or shutdown.

One replica: the high watermark is the log end offset. read_committed (isolation_level 1) reads
only up to the last stable offset (the first offset of an undecided transaction) and gets the
aborted transactions overlapping what it reads, so the client can drop their records.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v18.request import FetchRequest

from topiclake.segments.errors import OffsetOutOfRangeError, UnknownTopicError
from topiclake.segments.read_constants import IsolationLevel

from ..api_keys import ApiKey
from ..constants import NO_LEADER_EPOCH
from ..context import BrokerContext
from ..encoded import pre_encoding_allowed
from ..errors import BrokerError, error_code
from ..fetch_response import fetch_response
from ..fetch_sessions import SESSIONLESS, in_session, readable_check
from ..request_time import waiting
from ..throttle import FETCH
from ..wire import FileRegion, Request, SENDFILE_MIN_BYTES, make, nested
from .registry import REGISTRY

log = logging.getLogger(__name__)

FIRST_TOPIC_ID_VERSION = 13
FIRST_SESSION_VERSION = 7  # KIP-227: session_id, session_epoch, forgotten_topics_data


@dataclass(slots=True)
class _Slot:
    """One requested partition and what we have for it so far."""

    topic_key: Any  # name, or topic id (v13+)
    topic: str | None
    request: Any  # FetchPartition
    part: Any = None
    error: ErrorCode = ErrorCode.none
    records: bytes = b""
    history_start: int | None = None  # a tiered topic: the first offset its table holds (the log start reported)
    aborted: list | None = None  # read_committed from a bucket's closed segments: their aborts, read with them


def _read(part, offset: int, max_bytes: int, min_one: bool, committed: bool = False, archive=None):
    """On a reader thread: the records at `offset` as bytes or a FileRegion, none at or past the
    high watermark (read_committed: the last stable offset), as Kafka serves a consumer: on a
    bucket root or in a cluster the offsets past it are not stored yet, and a new leader may give
    them to other records. Below the log's start of a topic with remote
    storage on, the topic's table answers (`archive`); of a bucket partition after a takeover,
    its closed segments in the bucket (then the table below the manifest's start)."""
    start, end = part.log.log_start_offset, part.log.log_end_offset
    tiered = archive is not None and part.config.remote_storage_enable
    if offset < start and part.closed is not None and not (tiered and offset < part.closed.log_start_offset):
        return _read_closed(part, offset, max_bytes, min_one, committed)
    if offset < start and tiered:
        return _read_archive(part, offset, max_bytes, min_one, committed, archive)
    fetchable = part.last_stable_offset if committed else part.high_watermark
    if start <= offset < end and offset >= fetchable:
        return b""
    if offset == end:
        return b""
    # No refresh here: a maintenance job only moves the log start up and never the end, so it
    # cannot bring an out-of-range offset into range (and the I/O thread's refresh keeps the
    # aborted-transaction index in step with the segments, which this thread must not touch).
    if not start <= offset < end:
        raise OffsetOutOfRangeError(
            f"fetch offset {offset} of {part.topic}-{part.index} is outside [{start}, {end}]")
    try:
        result = part.log.read(offset, max_bytes, max_offset=fetchable, min_one_message=min_one)
    except OffsetOutOfRangeError:
        if part.closed is None or offset >= part.log.log_start_offset:
            raise
        # a sealed segment left the cache meanwhile (bucket.tail.drop_sealed): the bucket has it
        return _read(part, offset, max_bytes, min_one, committed, archive)
    return _records_of(result)


def _read_archive(part, offset: int, max_bytes: int, min_one: bool, committed: bool, archive):
    """The table's rows from `offset` as record batches (only committed records: the ingest drops
    aborted ones and markers, so read_committed readers see what they saw). Where the table has
    no row at or above `offset` but reaches the log's start (the offsets between were markers or
    aborted records), the log answers from its start: a client skips to the first batch's offset."""
    start = part.log.log_start_offset
    first = archive.first_offset(part.topic, part.index)
    if first is not None and offset < first:  # below the whole history (the table's own retention took it)
        raise OffsetOutOfRangeError(f"fetch offset {offset} of {part.topic}-{part.index} is below the first offset "
                                    f"{first} the topic's table holds")
    records = archive.read(part.topic, part.index, offset, max_bytes, min_one)
    if records is not None:
        return records
    archived = archive.archived_end(part.topic, part.index)
    if archived is not None and archived >= start and offset < start:
        return _read(part, start, max_bytes, min_one, committed)
    raise OffsetOutOfRangeError(f"fetch offset {offset} of {part.topic}-{part.index} is below the log's start "
                                f"{start} and not in the topic's table (it holds up to {archived})")


class ClosedRecords(NamedTuple):
    """A read_committed read of a bucket's closed segments, with the aborted transactions it overlaps."""

    records: bytes
    aborted: list


def _read_closed(part, offset: int, max_bytes: int, min_one: bool, committed: bool):
    """Below the cache's start of a bucket partition: its closed segments (Partition.read_closed;
    read_committed: with their aborted transactions, found here on the reader thread). Where no
    closed batch is at or above `offset` (a compacted segment's end), the cache answers from its start."""
    bound = part.last_stable_offset if committed else None
    records, aborted, upper = part.read_closed(offset, max_bytes, min_one, bound, committed)
    if not records and upper >= part.log.log_start_offset:
        return _read(part, part.log.log_start_offset, max_bytes, min_one, committed)
    return ClosedRecords(records, aborted) if aborted is not None else records


def _records_of(result) -> bytes | FileRegion:
    """A large range stays in the file (the connection sendfiles it; the region keeps the read
    result, and with it the open segment file, alive until sent). A small one is read here, on
    the reader thread, so the event loop never waits on the disk for it."""
    if result is None or result.size == 0:
        return b""
    if result.size < SENDFILE_MIN_BYTES:
        return result.to_bytes()
    return FileRegion(result.file, result.position, result.size, keepalive=result)


def _read_all(slots: list[_Slot], max_bytes: int, total: int, committed: bool, archive) -> list:
    """On a reader thread, one hop for the whole request (not one per partition: a consumer of
    2,000 partitions names them all in every fetch): each slot's records in order, within the
    budgets, and a tiered topic's history start; per slot (records, history start) or the
    exception its read raised, None where the budget is spent."""
    outcomes: list = []
    for slot in slots:
        budget = min(slot.request.partition_max_bytes, max_bytes - total)
        if budget <= 0 and total > 0:
            outcomes.append(None)
            continue
        try:
            records = _read(slot.part, slot.request.fetch_offset, max(budget, 0), total == 0, committed, archive)
            history_start = None
            if archive is not None and slot.part.config.remote_storage_enable:
                # Kafka's fetch answers the log start of the whole history (KIP-405), not the local one
                history_start = archive.first_offset(slot.part.topic, slot.part.index)
        except Exception as exc:  # answered for this partition alone
            outcomes.append(exc)
            continue
        aborted = None
        if isinstance(records, ClosedRecords):
            records, aborted = records
        outcomes.append((records, history_start, aborted))
        total += len(records)
    return outcomes


async def _fill(broker, slots: list[_Slot], max_bytes: int, committed: bool = False) -> int:
    """(Re)read every partition that has nothing yet; returns the bytes gathered in total."""
    total = sum(len(s.records) for s in slots)
    wanted = [s for s in slots if s.error == ErrorCode.none and s.part is not None and not s.records]
    if not wanted:
        return total
    # One hop for the whole request: on the bucket readers' threads if any partition reads below
    # its cache (ranged GETs), so fetches served from caches never wait behind the bucket.
    below_cache = any(s.part.closed is not None and s.request.fetch_offset < s.part.log.log_start_offset
                      for s in wanted)
    run = broker.partitions.run_bucket_read if below_cache else broker.partitions.run_read
    outcomes = await run(_read_all, wanted, max_bytes, total, committed, broker.archive)
    for slot, outcome in zip(wanted, outcomes):
        if outcome is None:
            continue
        if isinstance(outcome, BaseException):
            slot.error = error_code(outcome)
            if slot.error == ErrorCode.unknown_server_error and not broker.partitions.serves(slot.part):
                # Cluster mode: the partition was handed over while this read ran (its files are
                # closed): the client asks the new leader.
                slot.error = ErrorCode.not_leader_or_follower
            elif slot.error == ErrorCode.unknown_server_error:
                log.error("fetch from %s-%d at %d failed", slot.topic, slot.request.partition,
                          slot.request.fetch_offset, exc_info=outcome)
            elif slot.error == ErrorCode.corrupt_message:
                _report_corrupt(slot, outcome)
            continue
        slot.records, slot.history_start, slot.aborted = outcome
        total += len(slot.records)
    return total


_reported_corrupt: set[tuple[str | None, int, str]] = set()  # the log says each damage once, not per retry


def _report_corrupt(slot: _Slot, exc: BaseException) -> None:
    """The client gets CORRUPT_MESSAGE (and retries); the broker's log names the damage once."""
    key = (slot.topic, slot.request.partition, str(exc))
    if key in _reported_corrupt:
        return
    if len(_reported_corrupt) > 1000:
        _reported_corrupt.clear()
    _reported_corrupt.add(key)
    log.error("fetch from %s-%d at offset %d: corrupt log: %s (topiclake repair-log, with the broker stopped)",
              slot.topic, slot.request.partition, slot.request.fetch_offset, exc)


async def _resolve(broker, topics: list[tuple[Any, Any]], by_id: bool, readable=None) -> list[_Slot]:
    """`topics`: (topic key, its FetchPartitions) pairs, from the request or its session; those
    `readable` (an authorizer's check of names, if given) refuses answer TOPIC_AUTHORIZATION_FAILED
    (by name before the topic's existence, as Kafka, so a refusal says nothing of it)."""
    slots = []
    names = []  # per topic: (name, error)
    for key, _partitions in topics:
        name, topic_error = None, ErrorCode.none
        try:
            if by_id:
                meta = broker.partitions.topic_by_id(key)
                if meta is None:
                    raise BrokerError(f"unknown topic id {key}", ErrorCode.unknown_topic_id)
                name = meta.name
            elif readable is not None and not readable(key):
                raise BrokerError(f"not authorized to read {key}", ErrorCode.topic_authorization_failed)
            else:
                name = broker.partitions.topic(key).name
            if readable is not None and by_id and not readable(name):
                raise BrokerError(f"not authorized to read {name}", ErrorCode.topic_authorization_failed)
        except Exception as exc:
            name, topic_error = None, error_code(exc)
        names.append((name, topic_error))
    await broker.partitions.open_many((name, p.partition) for (_key, partitions), (name, error) in zip(topics, names)
                                      if error == ErrorCode.none for p in partitions)
    for (key, partitions), (name, topic_error) in zip(topics, names):
        for p in partitions:
            slot = _Slot(key, name, p, error=topic_error)
            if topic_error == ErrorCode.none:
                try:
                    slot.part = await broker.partitions.get(name, p.partition)
                    slot.part.check_leader_epoch(getattr(p, "current_leader_epoch", NO_LEADER_EPOCH))
                except (UnknownTopicError, BrokerError) as exc:
                    slot.part, slot.error = None, error_code(exc)
            slots.append(slot)
    return slots


class _Quiet:
    """An incremental fetch's partitions with nothing new for the client (KIP-227): no records at
    its offset, the high watermark and log start it last heard. They get no slot, no read and no
    row, only a watch; after an append wakes the fetch they are looked at again. Kept as parallel
    lists of what exists already (the partition, the session's entry, the topic key)."""

    __slots__ = ("parts", "entries", "keys")

    def __init__(self) -> None:
        self.parts: list = []
        self.entries: list = []
        self.keys: list = []

    def woken(self, committed: bool, serves: Any) -> dict[Any, list]:
        """Those no longer quiet, as (topic key -> FetchPartitions); the rest stay. One no longer
        served (resigned or deleted while the fetch waited) is woken: resolved again, it is
        answered as it is now."""
        woken: dict[Any, list] = {}
        kept = 0
        for part, entry, key in zip(self.parts, self.entries, self.keys):
            if serves(part) and _quiet(part, entry, committed):
                self.parts[kept], self.entries[kept], self.keys[kept] = part, entry, key
                kept += 1
            else:
                woken.setdefault(key, []).append(entry[0])
        del self.parts[kept:], self.entries[kept:], self.keys[kept:]
        return woken


def _quiet(part, entry, committed: bool) -> bool:
    """`entry`: a session's [FetchPartition, high watermark sent, log start sent]. The log start is
    `_rows`' (a bucket's: the manifest's if lower); a tiered topic's comes from its table, read
    on the reader thread: never quiet (read as before)."""
    if part.config.remote_storage_enable:
        return False
    request = entry[0]
    high_watermark = part.high_watermark
    start = part.log.log_start_offset
    if part.closed is not None:
        start = min(start, part.closed.log_start_offset)
    return (request.fetch_offset == (part.last_stable_offset if committed else high_watermark)
            and high_watermark == entry[1] and start == entry[2]
            and getattr(request, "current_leader_epoch", NO_LEADER_EPOCH) in (NO_LEADER_EPOCH, part.leader_epoch))


def _topic_name(broker, key: Any, by_id: bool) -> str | None:
    """The topic's name, None if it is unknown (its partitions then take the slot path, which answers the error)."""
    try:
        if by_id:
            meta = broker.partitions.topic_by_id(key)
            return None if meta is None else meta.name
        return broker.partitions.topic(key).name
    except Exception:
        return None


async def _resolve_session(broker, session, by_id: bool) -> tuple[list[_Slot], _Quiet]:
    """An incremental request's open partitions, to be sorted by `_Quiet.woken` once watched, and
    slots for the others (not open yet, or of an unknown topic: `_resolve` opens or refuses them).
    One pass over the session, no object made per open partition."""
    names: dict[Any, str | None] = {}
    loud: dict[Any, list] = {}
    refused: list[_Slot] = []
    denied: set = set()  # topic keys the authorizer no longer lets this client read
    readable = readable_check()
    quiet = _Quiet()
    for (key, index), entry in session.partitions.items():
        if key in names:
            name = names[key]
        else:
            name = names[key] = _topic_name(broker, key, by_id)
            if name is not None and readable is not None and not readable(name):
                denied.add(key)
        if key in denied:
            refused.append(_Slot(key, None, entry[0], error=ErrorCode.topic_authorization_failed))
            continue
        part = None if name is None else broker.partitions.opened(name, index)
        if part is not None:
            quiet.parts.append(part)
            quiet.entries.append(entry)
            quiet.keys.append(key)
        else:
            requests = loud.get(key)
            if requests is None:
                loud[key] = requests = []
            requests.append(entry[0])
    # `readable` again: a name not found above is refused before its existence is told (as Kafka)
    return refused + await _resolve(broker, list(loud.items()), by_id, readable), quiet


@REGISTRY.route(ApiKey.FETCH, (4, 18))
async def fetch(broker: BrokerContext, request: Request[FetchRequest]):
    body, cls = request.body, request.response_type
    by_id = request.api_version >= FIRST_TOPIC_ID_VERSION
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    max_bytes = getattr(body, "max_bytes", 2**31 - 1)
    committed = getattr(body, "isolation_level", IsolationLevel.READ_UNCOMMITTED) == IsolationLevel.READ_COMMITTED

    key_field = "topic_id" if by_id else "topic"  # the request's v12 schema names topics, v13+ ids them
    topics = [(getattr(t, key_field), t.partitions) for t in body.topics]
    context = SESSIONLESS
    if request.api_version >= FIRST_SESSION_VERSION:
        forgotten = ((getattr(f, key_field), f.partitions) for f in body.forgotten_topics_data)
        context = broker.fetch_sessions.context(body.session_id, body.session_epoch, by_id, topics, forgotten)
    if context.error != ErrorCode.none:  # no partitions: the client starts a new session
        throttle_ms = broker.throttle.request_throttle_ms(request.session.user, request.client_id)
        if pre_encoding_allowed():
            return fetch_response(request.api_version, {}, throttle_ms, error=context.error)
        return _response(cls, {}, by_id, throttle_ms, error=context.error)
    quiet, session = None, context.session
    if session is not None:  # incremental
        slots, quiet = await _resolve_session(broker, session, by_id)
        broker.metrics["fetch.sessions.incremental"] += 1
    else:  # a full request: a session's holds the topics the client may not read too (the policy let them through)
        readable = readable_check() if in_session(request.api_version, body) else None
        slots = await _resolve(broker, topics, by_id, readable)
    while True:
        # Register interest before reading, so an append between the read and the wait is not
        # missed: one future, resolved by an append to any of the partitions.
        appended = loop.create_future()
        watched = False
        for s in slots:
            if s.part is not None and s.error == ErrorCode.none:
                s.part.watch(appended)
                watched = True
        if quiet is not None and quiet.parts:
            for part in quiet.parts:
                part.watch(appended)
            watched = True
            woken = quiet.woken(committed, broker.partitions.serves)  # after the watch, as the reads below
            if woken:
                slots += await _resolve(broker, list(woken.items()), by_id, readable_check())
        total = await _fill(broker, slots, max_bytes, committed)
        remaining = deadline - loop.time()
        # A session's topic the client may no longer read is answered each time, but does not end
        # the wait (Kafka leaves unauthorized partitions out of it): the client would spin.
        stop = (total >= body.min_bytes or remaining <= 0 or not watched or broker.shutting_down.is_set()
                or any(s.error not in (ErrorCode.none, ErrorCode.topic_authorization_failed) for s in slots))
        if stop:
            appended.cancel()
            break
        with waiting():  # purgatory: not busy time for the request quota
            await asyncio.wait([appended], timeout=remaining)
        appended.cancel()
    fetched = sum(len(s.records) for s in slots)
    user = request.session.user
    throttle_ms = broker.throttle.record(FETCH, user, request.client_id, fetched)
    # Over the byte rate or the request quota: no records now (not counted), the connection
    # mutes, as Kafka's handleFetchRequest answers a throttled fetch.
    throttle_ms = max(throttle_ms, broker.throttle.request_throttle_ms(user, request.client_id))
    if throttle_ms:
        broker.throttle.unrecord(FETCH, user, request.client_id, fetched)
        for slot in slots:
            slot.records = b""
    for slot in slots:
        if slot.records:
            slot.part.bytes_out += len(slot.records)
    rows = _rows(slots, committed)
    session_id = 0
    if session is not None:
        rows = session.answer(rows)
        session_id = session.id
    elif context.create:
        session = broker.fetch_sessions.create(by_id, topics)
        if session is not None:  # else the cache is full: the client stays sessionless
            session.answer(rows)  # what this full answer tells becomes what the session last sent
            session_id = session.id
            broker.metrics["fetch.sessions.created"] += 1
    if pre_encoding_allowed():  # no policy appends refusals to it: bytes straight from the rows
        return fetch_response(request.api_version, rows, throttle_ms, session_id=session_id)
    return _response(cls, rows, by_id, throttle_ms, session_id=session_id)


def _rows(slots: list[_Slot], committed: bool) -> dict[Any, list[tuple]]:
    """Per topic key, in request order, each partition's answer: (index, error code, high
    watermark, last stable offset, log start offset, aborted transactions as (producer id,
    first offset) pairs or None, records)."""
    topics: dict[Any, list[tuple]] = {}
    for slot in slots:
        part = slot.part
        if part is None:
            hw = lso = start = -1
        else:
            hw, lso, start = part.high_watermark, part.last_stable_offset, part.log_start_offset
        if slot.history_start is not None:
            start = min(start, slot.history_start)
        if part is not None and part.closed is not None:  # a bucket: the manifest's start (KIP-405's shape)
            start = min(start, part.closed.log_start_offset)
        aborted = None
        if slot.aborted is not None and slot.records:
            aborted = tuple((t.producer_id, t.first_offset) for t in slot.aborted)
        elif committed and part is not None and slot.error == ErrorCode.none:
            # Kafka's bound is loose too (up to the next segment): extra entries are never matched.
            aborted = tuple((t.producer_id, t.first_offset)
                            for t in part.txns.aborted_between(slot.request.fetch_offset, lso)) if slot.records else ()
        topics.setdefault(slot.topic_key, []).append(
            (slot.request.partition, int(slot.error), hw, lso, start, aborted, slot.records))
    return topics


def _response(cls, rows: dict[Any, list[tuple]], by_id: bool, throttle_ms: int = 0, *,
              error: ErrorCode = ErrorCode.none, session_id: int = 0):
    """The answer (`_rows`' shape) as kio objects (for an authorization policy that appends the refused topics)."""
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    aborted_cls = nested(part_cls, "aborted_transactions")
    key_field = "topic_id" if by_id else "topic"
    responses = []
    for key, partitions in rows.items():
        parts = tuple(make(part_cls, partition_index=index, error_code=ErrorCode(code), high_watermark=hw,
                           last_stable_offset=lso, log_start_offset=start, preferred_read_replica=-1,
                           aborted_transactions=None if aborted is None else tuple(
                               make(aborted_cls, producer_id=pid, first_offset=first) for pid, first in aborted),
                           records=records)
                      for index, code, hw, lso, start, aborted, records in partitions)
        responses.append(make(topic_cls, **{key_field: key}, partitions=parts))
    return make(cls, throttle_time=datetime.timedelta(milliseconds=throttle_ms), error_code=error,
                session_id=session_id, responses=tuple(responses))
