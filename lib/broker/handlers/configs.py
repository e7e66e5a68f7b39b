"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topic configs.

Topic overrides live in the topic file (TopicRegistry); everything else is LogConfig's Kafka
default. A change is applied to the topic's open logs at once.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Mapping

from kio.schema.errors import ErrorCode

from topiclake.segments.config import LogConfig

from ..errors import BrokerError, error_code, error_message
from ..wire import make, nested
from .registry import REGISTRY

_NO_THROTTLE = datetime.timedelta(0)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

# DescribeConfigsResponse config_source / config_type values.
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG
_TYPE_OF = {bool: 1, str: 2, int: 5, float: 6, tuple: 7}  # BOOLEAN, STRING, LONG, DOUBLE, LIST
_DEFAULTS = LogConfig()
_CONFIG_TYPES = {f.name.replace("_", "."): _TYPE_OF.get(type(getattr(_DEFAULTS, f.name)), 0)
                 for f in dataclasses.fields(LogConfig)}

# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def config_entries(overrides: Mapping[str, str], entry_cls: type, keys=None) -> tuple:
    """Every topic config (override or default) as response entries of `entry_cls`."""
    effective = LogConfig.from_properties(overrides).to_properties()
    wanted = effective if not keys else {k: effective[k] for k in keys if k in effective}
    has_synonyms = "synonyms" in entry_cls.__dataclass_fields__
    synonym_cls = nested(entry_cls, "synonyms") if has_synonyms else None
    out = []
    for name, value in wanted.items():
        source = SOURCE_TOPIC if name in overrides else SOURCE_DEFAULT
        synonyms = (synonym_cls(name=name, value=value, source=source),) if has_synonyms else ()
        out.append(make(entry_cls, name=name, value=value, read_only=False, config_source=source,
                        is_default=source == SOURCE_DEFAULT, is_sensitive=False, synonyms=synonyms,
                        config_type=_CONFIG_TYPES.get(name, 0), documentation=None))
    return tuple(out)


@REGISTRY.route(32, (1, 4))
async def describe_configs(broker, request):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "results")
    entry_cls = nested(result_cls, "configs")
    results = []
    for res in body.resources:
        configs: tuple = ()
        try:
            if res.resource_type == TOPIC_RESOURCE:
                meta = broker.partitions.topic(res.resource_name, fresh=True)
                configs = config_entries(meta.config, entry_cls, res.configuration_keys)
            elif res.resource_type != BROKER_RESOURCE:
                raise BrokerError(f"resource type {res.resource_type} has no configs here", ErrorCode.invalid_request)
            code, message = ErrorCode.none, None
        except Exception as exc:
            code, message = error_code(exc), error_message(exc)
        results.append(make(result_cls, error_code=code, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name, configs=configs))
    return make(cls, throttle_time=_NO_THROTTLE, results=tuple(results))


async def _alter(broker, body, cls, updates_of) -> Any:
    """Shared by both alter APIs: `updates_of(resource, current_overrides)` -> (updates, replace)."""
    result_cls = nested(cls, "responses")
    results = []
    for res in body.resources:
        try:
            if res.resource_type != TOPIC_RESOURCE:
                raise BrokerError(f"only topic configs can be altered, not resource type {res.resource_type}",
                                  ErrorCode.invalid_request)
            meta = broker.partitions.topic(res.resource_name, fresh=True)
            updates, replace = updates_of(res, dict(meta.config))
            merged = {} if replace else dict(meta.config)
            merged.update(updates)
            LogConfig.from_properties({k: v for k, v in merged.items() if v is not None})  # validate
            if not body.validate_only:
                meta = broker.partitions.registry.alter_config(res.resource_name, updates, replace=replace)
                await broker.partitions.apply_config(meta)
            code, message = ErrorCode.none, None
        except Exception as exc:
            code, message = error_code(exc), error_message(exc)
        results.append(make(result_cls, error_code=code, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
    return make(cls, throttle_time=_NO_THROTTLE, responses=tuple(results))


@REGISTRY.route(33, (0, 2))
async def alter_configs(broker, request):
    # The legacy API replaces the whole set of overrides.
    return await _alter(broker, request.body, request.response_type,
                        lambda res, _current: ({c.name: c.value for c in res.configs}, True))


@REGISTRY.route(44, (0, 1))
async def incremental_alter_configs(broker, request):
    def updates_of(res, current: dict[str, str]):
        updates: dict[str, str | None] = {}
        for c in res.configs:
            op = c.config_operation
            if op == OP_SET:
                updates[c.name] = c.value
            elif op == OP_DELETE:
                updates[c.name] = None
            elif op in (OP_APPEND, OP_SUBTRACT):
                base = updates.get(c.name) or current.get(c.name) or LogConfig().to_properties().get(c.name, "")
                if _CONFIG_TYPES.get(c.name) != _TYPE_OF[tuple]:
                    raise BrokerError(f"{c.name} is not a list config: APPEND/SUBTRACT do not apply",
                                      ErrorCode.invalid_config)
                items = [i for i in base.split(",") if i]
                value_items = [i for i in (c.value or "").split(",") if i]
                if op == OP_APPEND:
                    items += [i for i in value_items if i not in items]
                else:
                    items = [i for i in items if i not in value_items]
                updates[c.name] = ",".join(items)
            else:
                raise BrokerError(f"unknown config operation {op} for {c.name}", ErrorCode.invalid_request)
        return updates, False

    return await _alter(broker, request.body, request.response_type, updates_of)
