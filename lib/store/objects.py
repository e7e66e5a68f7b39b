"""ObjectStore: the objects under an S3Root, through obstore (Python bindings of Rust's
object_store crate, the one delta-rs writes with, so both see the bucket with the same
configuration and the same semantics).

Keys are relative to the root's prefix (`log/t-0/00000000000000000000.log`) and checked before any
request: no empty, `.` or `..` segment, nothing that could leave the prefix. Writes are whole
objects, atomic: a reader sees the old object or the new one. Conditional writes are how
writers agree without a lock:

    put(key, data, mode=CREATE)          If-None-Match: *  -> ObjectExists when the key is there
    put(key, data, mode=IfMatch(etag))   If-Match: etag    -> PreconditionFailed when it changed
    put(key, data, mode=OVERWRITE)       unconditional

Every call is counted (metrics.py) and every failure is one typed line (errors.py). The client
gives up on a server that does not answer within a bounded time (connect 2 s, request 30 s, at
most 5 retries within 15 s), and then raises StoreUnavailable. The `*_async` twins are for an
event loop; they never block it.
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, AsyncIterator, Iterator, Literal

import obstore
from obstore import exceptions as obstore_errors
from obstore.store import S3Store

from .errors import InvalidKey, ObjectNotFound, RootError, from_obstore
from .metrics import ObjectStoreMetrics, process_metrics
from .root import S3Root

CREATE: Literal["create"] = "create"
OVERWRITE: Literal["overwrite"] = "overwrite"
LIST_PAGE = 1000  # keys per ListObjectsV2 page: one counted list request per page


@dataclass(frozen=True, slots=True)
class IfMatch:
    """Write only if the object's etag is still `etag` (as put or head returned it, quotes included)."""

    etag: str


PutMode = Literal["create", "overwrite"] | IfMatch


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str  # relative to the root's prefix
    size: int
    etag: str | None
    last_modified: datetime


@dataclass(frozen=True, slots=True)
class Listing:
    """One level under a prefix: the "directories" (keys ending at the next `/`) and the objects."""

    prefixes: list[str]
    objects: list[ObjectInfo]


class _StaticCredentials:
    """obstore's credential provider for fixed keys: with it the keys given are the only ones used
    (S3Store otherwise also reads AWS_SESSION_TOKEN and the like from the environment)."""

    def __init__(self, access_key_id: str, secret_access_key: str, session_token: str | None):
        self._credential = {"access_key_id": access_key_id, "secret_access_key": secret_access_key,
                            "token": session_token, "expires_at": None}

    def __call__(self) -> dict[str, Any]:
        return self._credential


class _Call:
    """What a request moved, filled in by the caller while the request is observed."""

    __slots__ = ("bytes_read", "bytes_written", "sent")

    def __init__(self) -> None:
        self.bytes_read = 0
        self.bytes_written = 0
        self.sent = True  # False: the call found it had nothing to ask (a list stream's end)


class ObjectStore:
    def __init__(self, root: S3Root, *, metrics: ObjectStoreMetrics | None = None,
                 connect_timeout_s: float = 2.0, request_timeout_s: float = 30.0,
                 max_retries: int = 5, retry_timeout_s: float = 15.0):
        self.root = root
        self.metrics = metrics if metrics is not None else process_metrics()
        config: dict[str, Any] = {"region": root.region, "conditional_put": "etag",
                                  "virtual_hosted_style_request": False}
        if root.endpoint:
            config["endpoint"] = root.endpoint
        credentials = root.credentials
        provider = (_StaticCredentials(credentials.access_key_id, credentials.secret_access_key,
                                       credentials.session_token) if credentials else None)
        self._store = S3Store(
            root.bucket, config=config, credential_provider=provider,
            client_options={"allow_http": root.allow_http, "connect_timeout": timedelta(seconds=connect_timeout_s),
                            "timeout": timedelta(seconds=request_timeout_s)},
            retry_config={"max_retries": max_retries, "retry_timeout": timedelta(seconds=retry_timeout_s),
                          "backoff": {"init_backoff": timedelta(milliseconds=100),
                                      "max_backoff": timedelta(seconds=2), "base": 2}})

    def __repr__(self) -> str:
        return f"ObjectStore({self.root})"

    # --- reads -----------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        path = self._path("get", key)
        with self._observe("get", key) as call:
            data = bytes(obstore.get(self._store, path).bytes())
            call.bytes_read = len(data)
        return data

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """The object and the ETag of exactly those bytes (for an If-Match write after it)."""
        path = self._path("get", key)
        with self._observe("get", key) as call:
            result = obstore.get(self._store, path)
            data = bytes(result.bytes())
            call.bytes_read = len(data)
        return data, result.meta.get("e_tag") or ""

    async def get_async(self, key: str) -> bytes:
        path = self._path("get", key)
        with self._observe("get", key) as call:
            result = await obstore.get_async(self._store, path)
            data = bytes(await result.bytes_async())
            call.bytes_read = len(data)
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object (end exclusive, as Python slices)."""
        path = self._path("get_range", key)
        with self._observe("get_range", key) as call:
            data = bytes(obstore.get_range(self._store, path, start=start, end=end))
            call.bytes_read = len(data)
        return data

    async def get_range_async(self, key: str, start: int, end: int) -> bytes:
        path = self._path("get_range", key)
        with self._observe("get_range", key) as call:
            data = bytes(await obstore.get_range_async(self._store, path, start=start, end=end))
            call.bytes_read = len(data)
        return data

    def head(self, key: str) -> ObjectInfo | None:
        """The object's size, etag and time; None when there is none."""
        path = self._path("head", key)
        try:
            with self._observe("head", key, missing_ok=True):
                return self._info(obstore.head(self._store, path))
        except ObjectNotFound:
            return None

    async def head_async(self, key: str) -> ObjectInfo | None:
        path = self._path("head", key)
        try:
            with self._observe("head", key, missing_ok=True):
                return self._info(await obstore.head_async(self._store, path))
        except ObjectNotFound:
            return None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under `prefix` (a whole path segment: "a" lists a/x, never ab), at any
        depth, page by page; "" lists the whole root."""
        stream = obstore.list(self._store, self._path("list", prefix, allow_root=True) or None, chunk_size=LIST_PAGE)
        for pages in itertools.count():
            with self._observe("list", prefix) as call:
                page = next(stream, None)
                call.sent = page is not None or pages == 0
            if page is None:
                return
            yield from (self._info(meta) for meta in page)

    async def list_async(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        stream = obstore.list(self._store, self._path("list", prefix, allow_root=True) or None, chunk_size=LIST_PAGE)
        for pages in itertools.count():
            with self._observe("list", prefix) as call:
                page = await anext(stream, None)
                call.sent = page is not None or pages == 0
            if page is None:
                return
            for meta in page:
                yield self._info(meta)

    def list_dir(self, prefix: str = "") -> Listing:
        """One level under `prefix`: its sub-prefixes (without a trailing `/`) and its objects."""
        path = self._path("list", prefix, allow_root=True)
        with self._observe("list", prefix):
            result = obstore.list_with_delimiter(self._store, path or None)
        return Listing([self._relative(p) for p in result["common_prefixes"]],
                       [self._info(meta) for meta in result["objects"]])

    # --- writes ----------------------------------------------------------------------------------

    def put(self, key: str, data: bytes | bytearray | memoryview, *, mode: PutMode = OVERWRITE) -> str:
        """Write the whole object; returns its new etag. CREATE raises ObjectExists when the key
        exists, IfMatch(etag) PreconditionFailed when the object's etag is no longer `etag`."""
        path = self._path("put", key)
        with self._observe("put", key) as call:
            result = obstore.put(self._store, path, data, mode=_mode(mode), use_multipart=False)
            call.bytes_written = len(data)
        return result["e_tag"]

    async def put_async(self, key: str, data: bytes | bytearray | memoryview, *, mode: PutMode = OVERWRITE) -> str:
        path = self._path("put", key)
        with self._observe("put", key) as call:
            result = await obstore.put_async(self._store, path, data, mode=_mode(mode), use_multipart=False)
            call.bytes_written = len(data)
        return result["e_tag"]

    def delete(self, key: str) -> None:
        """Remove the object; a key with no object is fine."""
        path = self._path("delete", key)
        with self._observe("delete", key, missing_ok=True):
            obstore.delete(self._store, path)

    async def delete_async(self, key: str) -> None:
        path = self._path("delete", key)
        with self._observe("delete", key, missing_ok=True):
            await obstore.delete_async(self._store, path)

    # --- plumbing --------------------------------------------------------------------------------

    def _path(self, operation: str, key: str, *, allow_root: bool = False) -> str:
        """The bucket key of `key` under the root's prefix; InvalidKey (nothing sent) if it is not one."""
        if allow_root:  # a listing's prefix: "" is the whole root, "a/" the same as "a"
            key = key.rstrip("/")
            if not key:
                return self.root.key()
        try:
            return self.root.key(key)
        except RootError as exc:
            raise InvalidKey(operation, f"s3://{self.root.bucket}/{self.root.prefix}", str(exc)) from None

    @contextmanager
    def _observe(self, operation: str, key: str, *, missing_ok: bool = False) -> Iterator[_Call]:
        """Time and count one request; turn obstore's failure into one typed ObjectStoreError.
        `missing_ok`: a missing object is an answer (head, delete), not an error in the counts."""
        call = _Call()
        started = time.monotonic()
        try:
            yield call
        except (obstore_errors.BaseError, OSError) as exc:
            error = from_obstore(exc, operation, self.root.uri(key) if key.strip("/") else self.root.uri())
            counted = None if missing_ok and isinstance(error, ObjectNotFound) else error.reason
            self.metrics.record(operation, time.monotonic() - started, error=counted)
            raise error from exc
        except Exception:
            self.metrics.record(operation, time.monotonic() - started, error="error")
            raise
        if call.sent:
            self.metrics.record(operation, time.monotonic() - started, bytes_read=call.bytes_read,
                                bytes_written=call.bytes_written)

    def _relative(self, path: str) -> str:
        prefix = self.root.prefix
        return path[len(prefix) + 1:] if prefix and path.startswith(prefix + "/") else path

    def _info(self, meta: dict[str, Any]) -> ObjectInfo:
        return ObjectInfo(self._relative(meta["path"]), meta["size"], meta.get("e_tag"), meta["last_modified"])


def _mode(mode: PutMode) -> Any:
    if isinstance(mode, IfMatch):
        return {"e_tag": mode.etag}
    if mode in (CREATE, OVERWRITE):
        return mode
    raise ValueError(f"put mode must be CREATE, OVERWRITE or IfMatch(etag), not {mode!r}")
