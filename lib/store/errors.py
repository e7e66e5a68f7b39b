"""The errors of the store package: one type per failure a caller acts on differently.

obstore (Rust's object_store) reports a failure as several lines: the request, the server's XML
error document and a debug dump of the cause chain. `from_obstore` turns that into one line that
names the operation and the object (`get s3://bucket/prefix/key: 404 Not Found (NoSuchKey: ...)`)
and picks the type:

    ObjectNotFound      the key is not there (a missing bucket is a plain ObjectStoreError)
    ObjectExists        a create (If-None-Match: *) lost: the key was there first
    PreconditionFailed  an If-Match put lost: the object changed since its etag was read
    StoreUnavailable    connection refused or reset, timeout, 5xx: retriable once the server is back
    AccessDenied        wrong keys or no permission (403, 401)
    InvalidKey          a key that would leave the root's prefix: refused before any request

RootError (a root or key this project cannot serve) shares the base class, StoreError.
"""

from __future__ import annotations

import re


class StoreError(Exception):
    """Base of every error this package raises on purpose."""


class RootError(StoreError, ValueError):
    """A root (or an object key under it) that this project cannot serve; the message is one line."""


class ObjectStoreError(StoreError):
    """A request to the object store failed. `reason` labels it in the metrics."""

    reason = "error"

    def __init__(self, operation: str, uri: str, detail: str):
        self.operation = operation
        self.uri = uri
        self.detail = detail
        super().__init__(f"object store {operation} {uri}: {detail}")


class ObjectNotFound(ObjectStoreError):
    reason = "not_found"


class ObjectExists(ObjectStoreError):
    """A create lost: another writer made the key first."""

    reason = "exists"


class PreconditionFailed(ObjectStoreError):
    """An If-Match put lost: the object's etag is no longer the one given."""

    reason = "precondition"


class StoreUnavailable(ObjectStoreError):
    """The server could not be reached or failed (connection refused or reset, timeout, 5xx) after
    the client's own retries. Retriable: the same call may succeed once the server is back. A
    create or If-Match put that ends here may or may not have been applied."""

    reason = "unavailable"


class AccessDenied(ObjectStoreError):
    """The keys are wrong or lack the permission (403, 401)."""

    reason = "denied"


class InvalidKey(ObjectStoreError, ValueError):
    """A key that would leave the root's prefix or that S3 tools disagree on; never sent."""

    reason = "invalid_key"


_STATUS = re.compile(r"status code: (\d{3} [A-Za-z -]+?):")
_XML_FIELD = r"<{0}>(.*?)</{0}>"
_OS_MESSAGE = re.compile(r'message: "([^"]+)"')
_HTTP_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
_RETRIES = re.compile(r"after (\d+) retries")
_CONNECTION_KINDS = ("Connect", "Timeout", "Request", "Interrupted", "Decode")


def from_obstore(exc: BaseException, operation: str, uri: str) -> ObjectStoreError:
    """The one-line, typed error for an exception obstore raised during `operation` on `uri`."""
    from obstore import exceptions as obstore_errors

    text = str(exc)
    said = _detail(text)
    if isinstance(exc, (FileNotFoundError, obstore_errors.NotFoundError)):
        if "<Code>NoSuchBucket</Code>" in text:
            return ObjectStoreError(operation, uri, f"the bucket does not exist: {said}")
        return ObjectNotFound(operation, uri, f"no such object: {said}")
    if isinstance(exc, obstore_errors.AlreadyExistsError):
        return ObjectExists(operation, uri, f"already exists: {said}")
    if isinstance(exc, obstore_errors.PreconditionError):
        return PreconditionFailed(operation, uri, f"changed since its etag was read: {said}")
    if isinstance(exc, (obstore_errors.PermissionDeniedError, obstore_errors.UnauthenticatedError)):
        return AccessDenied(operation, uri, f"access denied: {said}")
    if _unavailable(text):
        return StoreUnavailable(operation, uri, f"server unavailable: {said}")
    return ObjectStoreError(operation, uri, said)


def _unavailable(text: str) -> bool:
    status = _STATUS.search(text)
    if status:
        return status.group(1).startswith("5")
    kind = _HTTP_KIND.search(text)
    return bool(kind and kind.group(1) in _CONNECTION_KINDS) or "error sending request" in text


def _detail(text: str) -> str:
    """What the server or the connection said, in one line: `412 Precondition Failed
    (PreconditionFailed: At least one ...)`, `connection refused (after 3 retries)`."""
    head = text.split("\n\nDebug source:", 1)[0]
    status = _STATUS.search(head)
    if status:
        code, message = (re.search(_XML_FIELD.format(name), head, re.DOTALL) for name in ("Code", "Message"))
        said = f" ({code.group(1)}: {message.group(1)})" if code and message else ""
        return status.group(1) + said
    cause = _OS_MESSAGE.search(text)
    kind = _HTTP_KIND.search(text)
    retries = _RETRIES.search(head)
    if cause or kind:
        what = cause.group(1).lower() if cause else f"{kind.group(1).lower()} error"
        return what + (f" (after {retries.group(1)} retries)" if retries else "")
    first = " ".join(head.split())
    return first if len(first) <= 200 else first[:197] + "..."
