"""One client connection: size-prefixed frames in, responses out, in request order.

Requests on a connection are handled one at a time, like Kafka's SocketServer, which mutes a
channel until its in-flight request is answered: responses are therefore in order by
construction. The one exception is a handler's `Later` (later.py: a bucket root's produce, waiting
for a flush tick): its response is sent once the wait is over, from the wait's done callback,
while further requests are read and handled (up to MAX_ANSWERS_LATER of them, or MAX_BYTES_LATER
of their frames); every response still goes out in request order (the answers due are a queue,
sent from its head as each becomes ready). A directory
root's produce is a `Later` too, its appends queued on the writer thread (later.py): only Produce
requests are handled before it is answered. A frame with a negative or oversized size prefix, or
one kio cannot decode, closes this connection only (Kafka's InvalidReceiveException /
InvalidRequestException).

Fetched record ranges of 64 KiB or more arrive as file regions and go out with sendfile (the
response prefix is flushed first, then the kernel copies file to socket); the counters in
`BrokerContext.metrics` say which path the bytes took.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import logging
import struct
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from . import wire
from .api_keys import ApiKey
from .bucket.metadata import CHANGES_METADATA, MetadataNotStored
from .context import BrokerContext
from .errors import CloseConnection
from .handlers import REGISTRY
from .handlers.api_versions import unsupported_version_response
from .later import Later
from .request_time import Stopwatch
from .security import gate
from .security.sasl import PRE_AUTH_KEYS
from .session import Session

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# A non-idempotent librdkafka producer has no in-flight limit (max.in.flight 1,000,000) and builds a
# request per produce call at linger.ms 0: a tick's worth of them must be read, not 5 a tick.
MAX_ANSWERS_LATER = 2000
MAX_BYTES_LATER = 64 << 20  # the frames of the requests whose answers are due (their records are held)
# Answers written without waiting for the socket (`_write`) past this pause reading the client.
MAX_UNSENT_BYTES = 1 << 20
CLIENT_IN_FLIGHT_LIMIT = 5  # an idempotent client's max.in.flight.requests.per.connection (librdkafka, Java)


@dataclass(slots=True)
class _Due:
    """A request whose answer is due later: what its answer needs (its request read at `received`)."""

    request: Any
    route: Any
    received: float
    stopwatch: Stopwatch
    later: Later
    size: int  # its frame's
    answered: asyncio.Future  # done once sent (or given up)


class Connection:
    def __init__(self, broker: BrokerContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 session: Session | None = None):
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_host = f"/{peer[0]}" if isinstance(peer, tuple) else ""  # Kafka's InetAddress.toString()
        # Who the client is (session.py): PLAINTEXT and anonymous unless the listener says otherwise.
        self.session = session or Session(peer=self.peer, host=peer[0] if isinstance(peer, tuple) else "")
        self._handling = False
        # in request order, answered from the head as each is ready (`_answer_ready`)
        self._answers_later: collections.deque[_Due] = collections.deque()
        self._bytes_later = 0
        # Those of them whose appends may not have run yet; each leaves the set when answered (a
        # set, not a list pruned per request: thousands pending made every Produce walk them all).
        self._appends_pending: set[asyncio.Future] = set()
        self._muted_until = 0.0  # monotonic: a throttled later answer mutes the reads after it
        self._sendfile_ok = True  # until the transport says it cannot (then: read and write)

    @property
    def busy(self) -> bool:
        """A request is being handled or answered, or its answer not yet sent (shutdown waits for it)."""
        return (self._handling or any(not due.answered.done() for due in self._answers_later)
                or (not self.writer.is_closing() and self.writer.transport.get_write_buffer_size() > 0))

    async def serve(self) -> None:
        try:
            while not self.broker.shutting_down.is_set():
                await self._wait_for_room()
                frame = await self._read_frame()
                if frame is None:
                    return
                self._handling = True
                try:
                    if not await self._handle(frame):
                        return
                finally:
                    self._handling = False
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except asyncio.CancelledError:
            self._give_up_answers()
        except Exception:
            log.exception("connection %s failed", self.peer)
        finally:
            try:
                if self._answers_later:  # answers still due go out before the connection closes
                    await asyncio.wait([due.answered for due in self._answers_later])  # (not cancelled with this)
            except asyncio.CancelledError:  # the shutdown's grace is over
                self._give_up_answers()
            finally:
                self.close()

    def _give_up_answers(self) -> None:
        """The broker stops: no answer due is sent (a queued append still runs: queue_io)."""
        self.close()
        for due in list(self._answers_later):
            due.later.ready.cancel()  # its done callback marks it answered (and retrieves a failure)

    async def _wait_for_room(self) -> None:
        """Read no further while MAX_ANSWERS_LATER answers (or MAX_BYTES_LATER) are due, or a later
        answer's throttle lasts. A client with CLIENT_IN_FLIGHT_LIMIT answers due sends nothing more
        if it is idempotent: the store's tick is brought forward (`TickSchedule.window_full`)."""
        if self.writer.transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
            if self.writer.is_closing():
                raise ConnectionError("closed while answering")
            await self.writer.drain()  # answers written without waiting: a client that reads none is paused
        if not self._answers_later:  # no answer due (most requests): nothing to do
            return
        if len(self._answers_later) >= CLIENT_IN_FLIGHT_LIMIT:
            bucket = self.broker.partitions.bucket
            if bucket is not None:
                bucket.schedule.window_full()
        while len(self._answers_later) >= MAX_ANSWERS_LATER or self._bytes_later > MAX_BYTES_LATER:
            await asyncio.wait([self._answers_later[0].answered])
        if self.writer.is_closing():
            raise ConnectionError("closed while answering")
        pause = self._muted_until - time.monotonic()
        if pause > 0:
            await self._mute(datetime.timedelta(seconds=pause))

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
        self.session.closed()

    async def _read_frame(self) -> bytes | None:
        try:
            head = await self.reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return None
        (size,) = _SIZE.unpack(head)
        if head[:2] == b"\x16\x03":  # a TLS record header: ClientHello
            log.warning("closing %s: a TLS handshake on the %s listener (is the client set for SSL on the wrong "
                        "port?)", self.peer, self.session.listener)
            return None
        limit = self.broker.config.max_request_bytes
        if size < 0 or size > limit:
            log.warning("closing %s: frame size %d is outside [0, %d] (socket.request.max.bytes)",
                        self.peer, size, limit)
            return None
        return await self.reader.readexactly(size)

    async def _handle(self, frame: bytes) -> bool:
        """Handle one request; False closes the connection."""
        received = time.perf_counter()  # Kafka's TotalTimeMs starts when the request is read
        if self.session.sasl is not None and self.session.sasl.raw_tokens:  # SaslHandshake v0: a bare token
            answer = await self.broker.security.sasl.raw_token(self.session, frame)
            if answer is None or not await self._after_answers_due():
                return False
            self.writer.write(_SIZE.pack(len(answer)) + answer)
            await self.writer.drain()
            return True
        try:
            request = wire.parse_request(frame, REGISTRY.supports, self.client_host, self.session)
        except wire.UnsupportedVersion as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer an unknown ApiVersions version with v0 and our versions, so the
                # client can retry with one we serve.
                if not await self._after_answers_due():
                    return False
                await self._send(exc.correlation_id, unsupported_version_response())
                return True
            log.warning("closing %s: %s", self.peer, exc)
            return False
        except wire.MalformedRequest as exc:
            log.warning("closing %s: %s", self.peer, exc)
            return False
        if not self.session.authenticated and request.api_key not in PRE_AUTH_KEYS:
            log.warning("closing %s: api key %d before SASL authentication on the %s listener", self.peer,
                        request.api_key, self.session.listener)
            return False
        if self._appends_pending and request.api_key != ApiKey.PRODUCE:
            # Produce requests queued ahead: appended (and answered) before any other request sees the log
            await asyncio.wait(self._appends_pending)
            self._appends_pending.clear()
            if self.writer.is_closing():
                return False
        route = REGISTRY.get(request.api_key)
        stopwatch = Stopwatch()
        bucket = self.broker.partitions.bucket
        try:
            if bucket is not None and request.api_key in CHANGES_METADATA:
                # A bucket root: the change is in the bucket before it is answered.
                response = await bucket.changing_metadata(lambda: gate.dispatch(self.broker, route, request))
            else:
                response = await gate.dispatch(self.broker, route, request)  # the authorizer's checks, then the handler
        except MetadataNotStored as exc:  # handled, the store refused it: an error answer, never a closed connection
            response = wire.entries_failed(exc.response, ErrorCode.unknown_server_error, str(exc))
        except CloseConnection as exc:
            log.info("closing %s: %s", self.peer, exc)
            return False
        except Exception:
            log.exception("%s v%d from %s (%s) failed", route.name, request.api_version, self.peer,
                          request.client_id)
            return False
        if isinstance(response, Later):
            stopwatch.busy_seconds()  # its wait for the store is not busy time
            due = _Due(request, route, received, stopwatch, response, len(frame),
                       asyncio.get_running_loop().create_future())
            self._answers_later.append(due)
            self._bytes_later += due.size
            if response.appends_pending:
                self._appends_pending.add(due.answered)
                due.answered.add_done_callback(self._appends_pending.discard)
            response.ready.add_done_callback(self._answer_ready)
            return True
        if not await self._after_answers_due():
            return False
        await self._mute(await self._answer(request, response, received, stopwatch))
        return not self.session.close_after_response

    async def _after_answers_due(self) -> bool:
        """Once the answers due are sent (responses in request order); False: the connection closed."""
        if self._answers_later:
            await asyncio.wait([self._answers_later[-1].answered])
        return not self.writer.is_closing()

    def _answer_ready(self, _ready: asyncio.Future | None = None) -> None:
        """Send the answers due from the head of the queue whose waits are over, in request order
        (a done callback of each wait: the first not ready stops it, its own callback goes on)."""
        due_list = self._answers_later
        while due_list:
            due = due_list[0]
            if not due.answered.done():
                if not due.later.ready.done():
                    return
                self._answer_due(due)
            due_list.popleft()
            self._bytes_later -= due.size

    def _answer_due(self, due: _Due) -> None:
        """One ready answer, sent; a failure closes the connection, as a failing handler does."""
        request = due.request
        try:
            response = due.later.finish(due.later.ready.result())
            if not self.writer.is_closing():
                response, throttle = self._throttled(request, response, due.stopwatch)
                if response is not None:
                    self._write(request.correlation_id, response)
                self.broker.requests.record(request.api_key, request.api_version,
                                            time.perf_counter() - due.received, response)
                self._muted_until = max(self._muted_until, time.monotonic() + throttle.total_seconds())
        except (ConnectionError, asyncio.CancelledError):
            self.close()
        except CloseConnection as exc:
            log.info("closing %s: %s", self.peer, exc)
            self.close()
        except Exception:
            log.exception("%s v%d from %s (%s) failed", due.route.name, request.api_version, self.peer,
                          request.client_id)
            self.close()
        finally:
            due.answered.set_result(None)

    def _throttled(self, request, response, stopwatch: Stopwatch) -> tuple[Any, datetime.timedelta]:
        """The response with its throttle time, and that time. The request quota
        (request_percentage): the response says the longer of its own throttle (a byte rate, a
        mutation rate) and this one; the connection mutes for it."""
        request_ms = self.broker.throttle.record_request_time(request.session.user, request.client_id,
                                                             stopwatch.busy_seconds())
        throttle = max(getattr(response, "throttle_time", None) or datetime.timedelta(0),
                       datetime.timedelta(milliseconds=request_ms))
        if response is not None and request_ms and hasattr(response, "throttle_time"):
            response = dataclasses.replace(response, throttle_time=throttle)
        return response, throttle

    async def _answer(self, request, response, received: float, stopwatch: Stopwatch) -> datetime.timedelta:
        """Send a handled request's response (if it has one) and record it; returns its throttle time."""
        response, throttle = self._throttled(request, response, stopwatch)
        if response is not None:
            await self._send(request.correlation_id, response)
        self.broker.requests.record(request.api_key, request.api_version, time.perf_counter() - received, response)
        return throttle

    async def _mute(self, throttle_time) -> None:
        """A client over its quota: read nothing more from it until its throttle time has passed
        (Kafka mutes the channel, KIP-219); shutdown ends the wait."""
        if throttle_time:
            try:
                await asyncio.wait_for(self.broker.shutting_down.wait(), throttle_time.total_seconds())
            except asyncio.TimeoutError:
                pass

    def _write(self, correlation_id: int, response: Any) -> None:
        """A response of bytes only, into the transport without waiting (`_wait_for_room` drains)."""
        for chunk in wire.encode_response(correlation_id, response):
            if type(chunk) is not bytes:
                raise TypeError(f"a later answer must be bytes, not {type(chunk).__name__}")
            self.writer.write(chunk)

    async def _send(self, correlation_id: int, response: Any) -> None:
        for chunk in wire.encode_response(correlation_id, response):
            if type(chunk) is bytes:
                self.writer.write(chunk)
            else:
                await self._send_region(chunk)
        await self.writer.drain()

    async def _send_region(self, region: wire.FileRegion) -> None:
        """Record bytes from the segment file straight to the socket (os.sendfile through
        loop.sendfile) on a plain socket transport; otherwise (TLS, a non-socket transport) read
        and write them. `region` keeps the segment's file open until this returns, so a
        maintenance swap in the meantime cannot take the bytes away (the old inode lives on)."""
        metrics = self.broker.metrics
        if self._sendfile_ok:
            await self.writer.drain()  # the response prefix goes first
            try:
                sent = await asyncio.get_running_loop().sendfile(
                    self.writer.transport, region.fileobj, region.position, region.size, fallback=False)
            except RuntimeError:
                # No sendfile for this transport (SendfileNotAvailableError is a RuntimeError):
                # raised before any byte was sent, so fall back for the rest of the connection.
                self._sendfile_ok = False
            else:
                if sent != region.size:  # the frame's size prefix promised region.size bytes
                    raise ConnectionError(f"sendfile sent {sent} of {region.size} bytes to {self.peer}")
                metrics["fetch.sendfile.regions"] += 1
                metrics["fetch.sendfile.bytes"] += sent
                return
        data = await self.broker.partitions.run_read(region.read)  # off the loop: it may hit the disk
        metrics["fetch.copied.bytes"] += len(data)
        self.writer.write(data)
