"""Authorization in front of the API handlers: every request passes `dispatch`, which runs the
checks Kafka's KafkaApis makes for that API before (and around) the handler.

Without an authorizer (`[security] authorizer` unset) the handler runs as is. With one, each API
key has a policy (policies_*.py, registered with `@policy(key)` of `policies`): it authorizes the
request's resources, answers *_AUTHORIZATION_FAILED for what is refused, passes the rest to the
handler (`call(body)` runs it with a narrowed request body) and merges both into one response;
Metadata, ListGroups and the like drop what the principal may not describe.

Hook for new APIs (share groups, ...): add a policy for the key in a policies module, or let the
handler check for itself with `authorize(broker, request, Operation.READ, ResourceType.GROUP,
group_id)` and register `@policy(key)` with `policies.handler_checks` to say so. An API with no policy is
served to super users only (anyone else gets the response's error code, or the connection is
closed when the response has none): a new API is never open by accident.
"""

from __future__ import annotations

import dataclasses
import logging

from kio.schema.errors import ErrorCode

from topiclake.security.acls import Operation, ResourceType

from ..errors import CloseConnection
from ..wire import has_field
# Each policies module registers its policies with `policies.POLICIES` when imported.
from . import policies_admin, policies_data, policies_groups, policies_share  # noqa: F401
from .policies import POLICIES, Check, blank

log = logging.getLogger(__name__)


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


__all__ = ["authorize", "dispatch"]
