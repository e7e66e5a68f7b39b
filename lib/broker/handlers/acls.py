"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): the ACLs of the AclStore in shared
storage (security.acls), as Kafka's controller keeps them. Without an authorizer configured they
answer SECURITY_DISABLED, as Kafka does; who may call them is the gate's business (DESCRIBE or
ALTER on the cluster)."""

from __future__ import annotations

import logging

from kio.schema.create_acls.v3.request import CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode

from topiclake.security.acls import (
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
)

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY

log = logging.getLogger(__name__)
_DISABLED = "No Authorizer is configured on the broker ([security] authorizer = \"acl\")"


def _filter_of(f, prefix: str = "") -> AclFilter:
    return AclFilter(parse_enum(ResourceType, int(f.resource_type_filter)), f.resource_name_filter,
                     parse_enum(PatternType, int(f.pattern_type_filter)), f.principal_filter, f.host_filter,
                     parse_enum(Operation, int(f.operation)), parse_enum(Permission, int(f.permission_type)))


def _binding_fields(b: AclBinding) -> dict:
    return dict(resource_type=int(b.resource_type), resource_name=b.resource_name, pattern_type=int(b.pattern_type),
                principal=b.principal, host=b.host, operation=int(b.operation), permission_type=int(b.permission))


@REGISTRY.route(ApiKey.DESCRIBE_ACLS, (1, 3))
async def describe_acls(broker: BrokerContext, request: Request[DescribeAclsRequest]):
    cls = request.response_type
    if broker.security.authorizer is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.security_disabled, error_message=_DISABLED,
                    resources=())
    try:
        found = broker.security.acls.find(_filter_of(request.body))
    except AclError as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request, error_message=str(exc),
                    resources=())
    resource_cls = nested(cls, "resources")
    acl_cls = nested(resource_cls, "acls")
    by_resource: dict[tuple, list] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resources = tuple(make(resource_cls, resource_type=int(t), resource_name=name, pattern_type=int(p), acls=tuple(
        make(acl_cls, principal=b.principal, host=b.host, operation=int(b.operation),
             permission_type=int(b.permission)) for b in bindings))
        for (t, name, p), bindings in by_resource.items())
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, resources=resources)


@REGISTRY.route(ApiKey.CREATE_ACLS, (1, 3))
async def create_acls(broker: BrokerContext, request: Request[CreateAclsRequest]):
    cls = request.response_type
    result_cls = nested(cls, "results")
    results = []
    for c in request.body.creations:
        code, message = ErrorCode.none, None
        if broker.security.authorizer is None:
            code, message = ErrorCode.security_disabled, _DISABLED
        else:
            try:
                binding = AclBinding(parse_enum(ResourceType, int(c.resource_type)), c.resource_name,
                                     parse_enum(PatternType, int(c.resource_pattern_type)), c.principal, c.host,
                                     parse_enum(Operation, int(c.operation)),
                                     parse_enum(Permission, int(c.permission_type)))
                broker.security.acls.add([binding])
                log.info("ACL added by %s: %s", request.session.principal, binding.describe())
            except AclError as exc:
                code, message = ErrorCode.invalid_request, str(exc)
        results.append(make(result_cls, error_code=code, error_message=message))
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


@REGISTRY.route(ApiKey.DELETE_ACLS, (1, 3))
async def delete_acls(broker: BrokerContext, request: Request[DeleteAclsRequest]):
    cls = request.response_type
    result_cls = nested(cls, "filter_results")
    matching_cls = nested(result_cls, "matching_acls")
    if broker.security.authorizer is None:
        return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(
            make(result_cls, error_code=ErrorCode.security_disabled, error_message=_DISABLED, matching_acls=())
            for _ in request.body.filters))
    filters, errors = [], {}
    for i, f in enumerate(request.body.filters):
        try:
            parsed = _filter_of(f)
            parsed.validate()
            filters.append(parsed)
        except AclError as exc:
            errors[i] = str(exc)
            filters.append(None)
    deleted = iter(broker.security.acls.remove([f for f in filters if f is not None]))
    results = []
    for i, f in enumerate(filters):
        if f is None:
            results.append(make(result_cls, error_code=ErrorCode.invalid_request, error_message=errors[i],
                                matching_acls=()))
            continue
        removed = next(deleted)
        for b in removed:
            log.info("ACL removed by %s: %s", request.session.principal, b.describe())
        results.append(make(result_cls, error_code=ErrorCode.none, error_message=None, matching_acls=tuple(
            make(matching_cls, error_code=ErrorCode.none, error_message=None, **_binding_fields(b)) for b in removed)))
    return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(results))
