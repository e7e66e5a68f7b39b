"""What the authorization policies are written with: the policy registry (`@policy(key)`), the
`Check` of one request's principal against the authorizer, the refusal codes, the topic helpers
that split a request into allowed and refused items, and the builders of refusal answers.

The policies themselves live in policies_<family>.py, one module per API family; each imports
only this module (and never another policies module), and `gate` imports them all to register
them. Kafka keeps the same split: AuthHelper beside the per-API checks of KafkaApis.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import types
import typing
import uuid
from typing import Any, Awaitable, Callable

from kio.schema.errors import ErrorCode

from topiclake.security.acls import CLUSTER_NAME, Operation, ResourceType

from ..api_keys import ApiKey
from ..encoded import objects_wanted
from ..later import Later

log = logging.getLogger(__name__)

# The refusals (each API answers its own *_AUTHORIZATION_FAILED).
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
NO_TOPIC_ID = uuid.UUID(int=0)  # in answers about topics the principal may not describe
NO_INTERVAL = datetime.timedelta(0)  # a refused heartbeat names no interval

Call = Callable[[Any], Awaitable[Any]]
Policy = Callable[["Check", Any, Any, Call], Awaitable[Any]]
POLICIES: dict[ApiKey, Policy] = {}


def policy(*api_keys: ApiKey) -> Callable[[Policy], Policy]:
    def register(fn: Policy) -> Policy:
        for key in api_keys:
            if key in POLICIES:
                raise ValueError(f"api key {key} already has a policy")
            POLICIES[key] = fn
        return fn
    return register


async def handler_checks(check: "Check", broker, request, call: Call):
    """The policy of an API whose handler calls `authorize` itself."""
    return await call(request.body)


class Check:
    """One request's principal and host against the authorizer."""

    __slots__ = ("authorizer", "principal", "host", "request")

    def __init__(self, authorizer, request):
        self.authorizer = authorizer
        self.request = request
        self.principal = request.session.principal
        self.host = request.session.host

    def allowed(self, operation: Operation, rtype: ResourceType, name: str) -> bool:
        ok = self.authorizer.authorize(self.principal, self.host, operation, rtype, name)
        if not ok:
            log.debug("denied %s from %s: %s on %s %s", self.principal, self.host, operation.name, rtype.name, name)
        return ok

    def cluster(self, operation: Operation) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def topic(self, operation: Operation, name: str) -> bool:
        return self.allowed(operation, ResourceType.TOPIC, name)

    def group(self, operation: Operation, name: str) -> bool:
        return self.allowed(operation, ResourceType.GROUP, name)

    def txn(self, operation: Operation, name: str) -> bool:
        return self.allowed(operation, ResourceType.TRANSACTIONAL_ID, name)

    def any_of(self, operation: Operation, rtype: ResourceType) -> bool:
        return self.authorizer.authorize_any(self.principal, self.host, operation, rtype)

    def operations(self, rtype: ResourceType, name: str) -> int:
        return self.authorizer.authorized_operations(self.principal, self.host, rtype, name)


# ---------------------------------------------------------------------------- topics
def topic_name(broker, item, name_field: str = "name", id_field: str = "topic_id") -> str | None:
    """A request topic's name: its name field, or the name of its id (None: unknown id)."""
    name = getattr(item, name_field, None)
    if name is None and getattr(item, id_field, None) is not None:
        meta = broker.partitions.topic_by_id(getattr(item, id_field))
        return None if meta is None else meta.name
    return name


def split(broker, items, allowed, name_field: str = "name", id_field: str = "topic_id"):
    """(kept items, refused items): unknown ids are kept (the handler answers UNKNOWN_TOPIC_ID)."""
    kept, refused = [], []
    for item in items:
        name = topic_name(broker, item, name_field, id_field)
        (kept if name is None or allowed(name) else refused).append(item)
    return tuple(kept), tuple(refused)


def topic_key(item, name_field: str = "name") -> dict:
    return {name_field: getattr(item, name_field, None), "topic_id": getattr(item, "topic_id", None)}


# ------------------------------------------------------------------------- building responses
def replace(obj, **changes):
    return dataclasses.replace(obj, **changes)


async def serve_allowed(call: Call, body, kept: tuple, request_field: str, cls: type, denied: tuple,
                        response_field: str, *, always_call: bool = False, **when_all_refused: Any):
    """The usual policy ending: the handler runs on the allowed part of the request
    (`body.<request_field> = kept`) and the refused part's answers (`denied`) are appended to its
    `<response_field>`; when nothing is allowed, the handler is not called at all (the answer is
    `cls` with only the refusals, and `when_all_refused`) unless `always_call` (the request does
    more than its `<request_field>` says: a fetch session's)."""
    if not kept and not always_call:
        return blank(cls, **{response_field: denied}, **when_all_refused)
    if denied:
        with objects_wanted():  # the refusals are appended to kio objects, not to bytes
            response = await call(replace(body, **{request_field: kept}))
    else:
        response = await call(replace(body, **{request_field: kept}))
    if not denied or response is None:  # None: an acks=0 produce gets no answer
        return response
    if isinstance(response, Later):  # a bucket root's produce, answered after the flush
        return response.then(lambda done: replace(done, **{response_field: getattr(done, response_field) + denied}))
    return replace(response, **{response_field: getattr(response, response_field) + denied})


def blank(cls: type, code: ErrorCode = ErrorCode.none, **values: Any):
    """An instance of kio class `cls` with `values`, every other required field empty (arrays
    empty, numbers -1, strings "", error codes `code`)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            out[f.name] = values[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            out[f.name] = _empty(hints[f.name], code)
    return cls(**out)


def _empty(hint, code: ErrorCode):
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return None
    if typing.get_origin(hint) is tuple:
        return ()
    if hint is ErrorCode:
        return code
    if isinstance(hint, type):
        if issubclass(hint, bool):
            return False
        if issubclass(hint, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(hint, int):
            return -1
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
        if issubclass(hint, uuid.UUID):
            return uuid.UUID(int=0)
        if dataclasses.is_dataclass(hint):
            return blank(hint, code)
    return None
