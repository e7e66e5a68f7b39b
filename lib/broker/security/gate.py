"""Authorization in front of the API handlers: every request passes `dispatch`, which runs the
checks Kafka's KafkaApis makes for that API before (and around) the handler.

Without an authorizer (`[security] authorizer` unset) the handler runs as is. With one, each API
key has a policy (policies_*.py, registered with `@policy(key)`): it authorizes the request's
resources, answers *_AUTHORIZATION_FAILED for what is refused, passes the rest to the handler
(`call(body)` runs it with a narrowed request body) and merges both into one response; Metadata,
ListGroups and the like drop what the principal may not describe.

Hook for new APIs (share groups, ...): add a policy for the key in a policies module, or let the
handler check for itself with `authorize(broker, request, Operation.READ, ResourceType.GROUP,
group_id)` and register `@policy(key)` with `handler_checks` to say so. An API with no policy is
served to super users only (anyone else gets the response's error code, or the connection is
closed when the response has none): a new API is never open by accident.
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
from ..errors import CloseConnection
from ..wire import has_field, make

log = logging.getLogger(__name__)

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


def authorize(broker, request, operation: Operation, rtype: ResourceType, name: str) -> bool:
    """For handlers that check for themselves: may this request's principal do it? (True when
    no authorizer is configured.)"""
    authorizer = broker.security.authorizer
    return authorizer is None or Check(authorizer, request).allowed(operation, rtype, name)


async def dispatch(broker, route, request):
    authorizer = broker.security.authorizer
    if authorizer is None:
        return await route.handler(broker, request)
    check = Check(authorizer, request)

    async def call(body):
        narrowed = request if body is request.body else dataclasses.replace(request, body=body)
        return await route.handler(broker, narrowed)

    chosen = POLICIES.get(request.api_key)
    if chosen is None:
        if authorizer.config.is_super_user(check.principal):
            return await call(request.body)
        return refuse_unknown_api(request)
    return await chosen(check, broker, request, call)


def refuse_unknown_api(request):
    cls = request.response_type
    if not has_field(cls, "error_code"):
        raise CloseConnection(f"api key {request.api_key} has no authorization policy; only super users may call it")
    log.warning("refused api key %d to %s: it has no authorization policy (super users only)", request.api_key,
                request.session.principal)
    return blank(cls, ErrorCode.cluster_authorization_failed)


# ------------------------------------------------------------------------- building responses
def replace(obj, **changes):
    return dataclasses.replace(obj, **changes)


async def serve_allowed(call: Call, body, kept: tuple, request_field: str, cls: type, denied: tuple,
                        response_field: str, **when_all_refused: Any):
    """The usual policy ending: the handler runs on the allowed part of the request
    (`body.<request_field> = kept`) and the refused part's answers (`denied`) are appended to its
    `<response_field>`; when nothing is allowed, the handler is not called at all (the answer is
    `cls` with only the refusals, and `when_all_refused`)."""
    if not kept:
        return blank(cls, **{response_field: denied}, **when_all_refused)
    response = await call(replace(body, **{request_field: kept}))
    if not denied or response is None:  # None: an acks=0 produce gets no answer
        return response
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


from . import policies_admin, policies_data, policies_groups, policies_share  # noqa: E402,F401  (each registers its policies)

__all__ = ["POLICIES", "Check", "authorize", "blank", "dispatch", "handler_checks", "make", "policy", "replace"]
