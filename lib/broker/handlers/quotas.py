"""DescribeClientQuotas (48) and AlterClientQuotas (49) over client_quotas.ClientQuotas (byte rates
are enforced by throttle.py)."""

from __future__ import annotations

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from kio.schema.errors import ErrorCode

from ..api_keys import ApiKey
from ..client_quotas import ClientQuotas, FilterComponent
from ..context import BrokerContext
from ..errors import error_code, error_message
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY


@REGISTRY.route(ApiKey.DESCRIBE_CLIENT_QUOTAS, (0, 1))
async def describe_client_quotas(broker: BrokerContext, request: Request[DescribeClientQuotasRequest]):
    body, cls = request.body, request.response_type
    entry_cls = nested(cls, "entries")
    entity_cls = nested(entry_cls, "entity")
    value_cls = nested(entry_cls, "values")
    components = [FilterComponent(c.entity_type, c.match_type, c.match) for c in body.components]
    try:
        found = ClientQuotas(broker.layout).describe(components, body.strict)
    except Exception as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=error_code(exc), error_message=error_message(exc),
                    entries=None)
    entries = tuple(make(entry_cls, entity=tuple(make(entity_cls, entity_type=t, entity_name=n)
                                                 for t, n in sorted(entity, key=lambda pair: pair[0])),
                         values=tuple(make(value_cls, key=k, value=v) for k, v in sorted(values.items())))
                    for entity, values in found.items())
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, entries=entries)


@REGISTRY.route(ApiKey.ALTER_CLIENT_QUOTAS, (0, 1))
async def alter_client_quotas(broker: BrokerContext, request: Request[AlterClientQuotasRequest]):
    body, cls = request.body, request.response_type
    entry_cls = nested(cls, "entries")
    entity_cls = nested(entry_cls, "entity")
    quotas = broker.throttle.quotas  # the enforcement's own: its change applies from the next request
    results = []
    for entry in body.entries:
        entity = frozenset((e.entity_type, e.entity_name) for e in entry.entity)
        try:
            quotas.alter(entity, [(op.key, None if op.remove else op.value) for op in entry.ops],
                         validate_only=body.validate_only)
            code, message = ErrorCode.none, None
        except Exception as exc:
            code, message = error_code(exc), error_message(exc)
        results.append(make(entry_cls, error_code=code, error_message=message, entity=tuple(
            make(entity_cls, entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity)))
    return make(cls, throttle_time=NO_THROTTLE, entries=tuple(results))
