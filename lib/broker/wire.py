"""kio glue: request frames in, response frames out.

A request frame (after the 4-byte size prefix) is `api_key i16 | api_version i16 |
correlation_id i32 | ...`: the first eight bytes are the same for every header version, so we
read them by hand, pick the request schema (and with it the header version, v1 or v2) from kio,
and let kio's native reader parse header and body. Responses go the other way with the header
version kio records on the response class (ApiVersions always answers with header v0).

Record bytes in a Fetch response may be a `FileRegion` (a file slice to send with sendfile):
`encode_response` returns the frame as chunks, bytes and file regions in order, so the records
never pass through Python when the transport can splice them.
"""

from __future__ import annotations

import dataclasses
import io
import os
import struct
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from topiclake.protocol.codec import SIZE as _SIZE
from topiclake.protocol.codec import (  # noqa: F401  (re-exported: the handlers build responses with them)
    decode_response,
    encode_request,
    has_field,
    has_request_schema,
    make,
    nested,
    reader,
    request_schema,
    response_schema,
    writer,
)

from .api_keys import ApiKey
from .encoded import PreEncoded
from .session import DEFAULT_SESSION, Session

_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
# Record ranges smaller than this are read into the response instead: a copy is cheaper than
# draining the socket for a sendfile call.
SENDFILE_MIN_BYTES = 64 * 1024


class MalformedRequest(Exception):
    """A frame kio cannot parse: the connection that sent it is closed."""


class UnsupportedVersion(Exception):
    """An api key / version this broker does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"unsupported api key {api_key} version {api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


Body = TypeVar("Body")


@dataclass(frozen=True, slots=True)
class Request(Generic[Body]):
    """A decoded request. `Request[JoinGroupRequest]` names the kio class of the newest version a
    handler serves; the body is the class of the version the client sent (kio has one per
    version), so fields that only some versions have are read with getattr/has_field."""

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Body  # the kio request dataclass
    client_host: str = ""  # the client's address as Kafka shows it ("/127.0.0.1"), for group members
    session: Session = DEFAULT_SESSION  # the connection's listener and principal (session.py)

    @property
    def response_type(self) -> type:
        return response_schema(self.api_key, self.api_version)


def peek_header(frame) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame, or MalformedRequest."""
    if len(frame) < _PREFIX.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    return _PREFIX.unpack_from(frame, 0)


def parse_request(frame, supported: Callable[[int, int], bool], client_host: str = "",
                  session: Session = DEFAULT_SESSION) -> Request:
    """Decode a whole frame. `supported(api_key, version)` says what this broker serves."""
    api_key, api_version, correlation_id = peek_header(frame)
    schema = request_schema(api_key, api_version) if supported(api_key, api_version) else None
    if schema is None:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    try:
        header, used = reader(schema.__header_schema__)(frame, 0)
        body, _size = reader(schema)(frame, used)
    except Exception as exc:  # noqa: BLE001 - kio raises SerialError, ValueError, UnicodeDecodeError, ...
        raise MalformedRequest(f"cannot decode api key {api_key} v{api_version}: {exc}") from None
    # Bytes after the body are ignored, as Kafka's request parser does (librdkafka's Metadata v12
    # carries a few).
    return Request(ApiKey(api_key), api_version, correlation_id, header.client_id, body, client_host, session)


# ---------------------------------------------------------------------------------------------
# Responses

class FileRegion(bytes):
    """Record bytes that stay in a file: `size` bytes at `position` of the open file `fileobj`.

    It poses as a records value (bytes) of length `size` so kio writes the right length prefix; the
    chunk writer below then emits the region instead of copying bytes. `keepalive` holds whatever
    must stay open until the bytes are sent (a segment being swapped out keeps its fd).
    """

    fileobj: Any
    position: int
    size: int
    keepalive: Any

    def __new__(cls, fileobj, position: int, size: int, keepalive: Any = None):
        self = super().__new__(cls, b"")
        self.fileobj, self.position, self.size, self.keepalive = fileobj, position, size, keepalive
        return self

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def read(self) -> bytes:
        data = os.pread(self.fileobj.fileno(), self.size, self.position)
        if len(data) != self.size:
            raise OSError(f"short read: {len(data)} of {self.size} bytes at {self.position}")
        return data


class _ChunkBuffer:
    """A kio Writable that keeps FileRegions apart from the bytes around them."""

    def __init__(self) -> None:
        self.chunks: list[bytes | FileRegion] = []
        self._bytes = io.BytesIO()

    def write(self, data) -> None:
        if type(data) is FileRegion:
            self._cut()
            self.chunks.append(data)
        else:
            self._bytes.write(data)

    def _cut(self) -> None:
        if self._bytes.tell():
            self.chunks.append(self._bytes.getvalue())
            self._bytes = io.BytesIO()

    def finish(self) -> list[bytes | FileRegion]:
        self._cut()
        return self.chunks


_I32 = struct.Struct(">i")


_JOIN_BELOW = 64 * 1024


def _encode_pre_encoded(correlation_id: int, response: PreEncoded) -> list[bytes | FileRegion]:
    head = _I32.pack(correlation_id) + (b"\x00" if response.flexible_header else b"")
    throttle = _I32.pack(int(response.throttle_time.total_seconds() * 1000))
    chunks: list[bytes | FileRegion] = [head]
    # Small adjacent bytes joined: the connection writes each chunk, and each write to an idle
    # socket is a send of its own (a large chunk is sent as it is, not copied).
    for chunk in (*response.before_throttle, throttle, *response.rest):
        if type(chunk) is bytes and type(chunks[-1]) is bytes and len(chunks[-1]) + len(chunk) <= _JOIN_BELOW:
            chunks[-1] += chunk
        else:
            chunks.append(chunk)
    chunks[0] = _SIZE.pack(sum(len(c) for c in chunks)) + chunks[0]
    return chunks


def encode_response(correlation_id: int, response: Any) -> list[bytes | FileRegion]:
    """The whole response frame (size prefix included) as chunks to send in order."""
    if type(response) is PreEncoded:
        return _encode_pre_encoded(correlation_id, response)
    out = _ChunkBuffer()
    header_type = type(response).__header_schema__
    writer(header_type)(out, header_type(correlation_id=correlation_id))
    writer(type(response))(out, response)
    chunks = out.finish()
    size = sum(len(c) for c in chunks)
    first = chunks[0]
    chunks[0] = _SIZE.pack(size) + first if not isinstance(first, FileRegion) else _SIZE.pack(size)
    if isinstance(first, FileRegion):
        chunks.insert(1, first)
    return chunks


def entries_failed(response: Any, code: Any, why: str) -> Any:
    """`response` with every entry of its top-level arrays that succeeded answered `code` instead,
    with the message '<its name>: why' where the version carries one: an error for each topic,
    resource or user of a request whose change did not take (entries that failed keep theirs)."""
    changed = {}
    for field in dataclasses.fields(response):
        entries = getattr(response, field.name)
        if isinstance(entries, tuple) and entries and dataclasses.is_dataclass(entries[0]) \
                and has_field(type(entries[0]), "error_code"):
            changed[field.name] = tuple(_entry_failed(entry, code, why) for entry in entries)
    return dataclasses.replace(response, **changed)


def _entry_failed(entry: Any, code: Any, why: str) -> Any:
    if entry.error_code != 0:
        return entry
    # What did not take is not listed as done: a DeleteAcls filter's matching ACLs (Kafka answers
    # a failed filter with none).
    undone = {"matching_acls": ()} if has_field(type(entry), "matching_acls") else {}
    if not has_field(type(entry), "error_message"):
        return dataclasses.replace(entry, error_code=code, **undone)
    name = next((getattr(entry, n) for n in ("name", "resource_name", "user") if has_field(type(entry), n)), None)
    return dataclasses.replace(entry, error_code=code, error_message=f"{name}: {why}" if name else why, **undone)
