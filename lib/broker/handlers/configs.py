"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44), ListConfigResources (74)
for TOPIC, BROKER and GROUP resources (config_resources.py says where each value comes from).

A topic change is applied to the topic's open logs at once; a cluster-wide topic default to
every open log; a group config at the group's next heartbeat.
"""

from __future__ import annotations

from typing import Any

from kio.schema.alter_configs.v2.request import AlterConfigsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest
from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest

from .. import config_resources as resources
from ..api_keys import ApiKey
from ..context import BrokerContext
from ..errors import BrokerError, error_code, error_message
from ..wire import Request, make, nested
from ._common import NO_THROTTLE, config_entries
from .registry import REGISTRY

# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


@REGISTRY.route(ApiKey.DESCRIBE_CONFIGS, (1, 4))
async def describe_configs(broker: BrokerContext, request: Request[DescribeConfigsRequest]):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "results")
    entry_cls = nested(result_cls, "configs")
    with_synonyms = bool(getattr(body, "include_synonyms", False))
    with_documentation = bool(getattr(body, "include_documentation", False))
    results = []
    for res in body.resources:
        configs: tuple = ()
        try:
            entries = resources.describe(broker, res.resource_type, res.resource_name, res.configuration_keys,
                                         with_synonyms=with_synonyms)
            configs = config_entries(entries, entry_cls, with_documentation=with_documentation)
            code, message = ErrorCode.none, None
        except Exception as exc:
            code, message = error_code(exc), error_message(exc)
        results.append(make(result_cls, error_code=code, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name, configs=configs))
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


async def _alter(broker, body, cls, updates_of) -> Any:
    """Shared by both alter APIs: `updates_of(resource)` -> (updates, replace)."""
    result_cls = nested(cls, "responses")
    results = []
    for res in body.resources:
        try:
            updates, replace = updates_of(res)
            await resources.alter(broker, res.resource_type, res.resource_name, updates, replace=replace,
                                  validate_only=body.validate_only)
            code, message = ErrorCode.none, None
        except Exception as exc:
            code, message = error_code(exc), error_message(exc)
        results.append(make(result_cls, error_code=code, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
    return make(cls, throttle_time=NO_THROTTLE, responses=tuple(results))


@REGISTRY.route(ApiKey.ALTER_CONFIGS, (0, 2))
async def alter_configs(broker: BrokerContext, request: Request[AlterConfigsRequest]):
    # The legacy API replaces the whole set of a resource's dynamic values.
    return await _alter(broker, request.body, request.response_type,
                        lambda res: ({c.name: c.value for c in res.configs}, True))


@REGISTRY.route(ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1))
async def incremental_alter_configs(broker: BrokerContext, request: Request[IncrementalAlterConfigsRequest]):
    def updates_of(res):
        current = resources.current(broker, res.resource_type, res.resource_name)
        updates: dict[str, str | None] = {}
        for c in res.configs:
            op = c.config_operation
            if op == OP_SET:
                updates[c.name] = c.value
            elif op == OP_DELETE:
                updates[c.name] = None
            elif op in (OP_APPEND, OP_SUBTRACT):
                if not resources.is_list(res.resource_type, c.name):
                    raise BrokerError(f"{c.name} is not a list config: APPEND/SUBTRACT do not apply",
                                      ErrorCode.invalid_config)
                base = updates.get(c.name, current.get(c.name))
                if base is None:
                    base = resources.default_value(res.resource_type, c.name) or ""
                items = [i for i in base.split(",") if i]
                value_items = [i for i in (c.value or "").split(",") if i]
                if op == OP_APPEND:
                    items += [i for i in value_items if i not in items]
                else:  # may leave the list empty (Kafka 4 allows an empty cleanup.policy)
                    items = [i for i in items if i not in value_items]
                updates[c.name] = ",".join(items)
            else:
                raise BrokerError(f"unknown config operation {op} for {c.name}", ErrorCode.invalid_request)
        return updates, False

    return await _alter(broker, request.body, request.response_type, updates_of)


@REGISTRY.route(ApiKey.LIST_CONFIG_RESOURCES, (0, 1))
async def list_config_resources(broker: BrokerContext, request: Request[ListConfigResourcesRequest]):
    """v0 (ListClientMetricsResources) lists client-metrics resources only: there are none here."""
    body, cls = request.body, request.response_type
    entry_cls = nested(cls, "config_resources")
    listed = resources.listed(broker, body.resource_types) if request.api_version >= 1 else []
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, config_resources=tuple(
        make(entry_cls, resource_name=name, resource_type=kind) for kind, name in listed))
