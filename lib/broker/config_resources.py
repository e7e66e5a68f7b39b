"""Config resources as the config APIs see them: TOPIC, BROKER and GROUP.

- TOPIC: the topic's overrides (DYNAMIC_TOPIC_CONFIG) over the cluster-wide dynamic defaults
  (DYNAMIC_DEFAULT_BROKER_CONFIG) over Kafka's defaults (DEFAULT_CONFIG); every Kafka 4.x topic
  config, each with its type and documentation.
- BROKER "<this broker's id>": the broker's whole configuration. Its settings file and flags are
  STATIC_BROKER_CONFIG where they differ from the built-in default (DEFAULT_CONFIG otherwise);
  the topic defaults (log.retention.ms, min.insync.replicas, ...) are DYNAMIC_DEFAULT_BROKER_CONFIG
  where set cluster-wide. BROKER "" (the cluster default) holds only those dynamic defaults, and
  is the one broker resource that can be altered: any partition may be served by any broker
  over shared storage, so topic defaults are set cluster-wide, never per broker.
- GROUP "<group id>": group.group_configs.

Synonyms (include_synonyms) list where a value could come from, in precedence order, as Kafka
does; without include_synonyms there are none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from kio.schema.errors import ErrorCode

from topiclake.segments.config import LogConfig
from topiclake.segments.storage import CLUSTER_DEFAULT, topic_defaults

from .config import BrokerConfig
from .security.config import format_listeners
from .errors import BrokerError
from .group.group_configs import SPECS as GROUP_SPECS

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32

# DescribeConfigsResponse config_source
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT, GROUP_CONFIG = 1, 2, 3, 4, 5, 8
# DescribeConfigsResponse config_type
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
_TYPES = {"bool": BOOLEAN, "str": STRING, "int": LONG, "float": DOUBLE, "list": LIST}
# Topic configs (and their broker synonyms) Kafka defines as INT; every other integer is a LONG.
_INT_TOPIC_CONFIGS = frozenset({"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
                                "min.insync.replicas", "compression.gzip.level", "compression.lz4.level",
                                "compression.zstd.level"})


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    config_type: int
    documentation: str | None
    synonyms: tuple[Synonym, ...] = ()
    read_only: bool = False
    sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT


def _entry(name: str, synonyms: list[Synonym], config_type: int, doc: str | None, **flags) -> ConfigEntry:
    """The first synonym (highest precedence) gives the value and source."""
    first = synonyms[0]
    return ConfigEntry(name, first.value, first.source, config_type, doc, tuple(synonyms), **flags)


def _topic_type(name: str) -> int:
    return INT if name in _INT_TOPIC_CONFIGS else _TYPES[LogConfig.property_spec(name).kind]


# ====================================================================== TOPIC
def topic_entries(overrides: Mapping[str, str], defaults: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config of a topic with these overrides over these cluster defaults (topic names)."""
    builtin = LogConfig().to_properties()
    out = []
    for name, value in LogConfig.from_properties({**defaults, **overrides}).to_properties().items():
        server = LogConfig.server_synonym(name)
        synonyms = []
        if name in overrides:
            synonyms.append(Synonym(name, value, DYNAMIC_TOPIC))
        if name in defaults:
            synonyms.append(Synonym(server, defaults[name], DYNAMIC_DEFAULT_BROKER))
        synonyms.append(Synonym(server or name, builtin[name], DEFAULT))
        out.append(_entry(name, synonyms, _topic_type(name), LogConfig.property_spec(name).doc))
    return out


# ===================================================================== BROKER
@dataclass(frozen=True, slots=True)
class _Static:
    name: str  # Kafka's property
    path: str  # attribute path in BrokerConfig
    config_type: int
    doc: str
    read_only: bool = True


# The broker's own settings (conf/topiclake.toml [broker]/[groups]/[transactions]/[share] and flags), by Kafka name.
_STATIC = (
    _Static("broker.id", "broker_id", INT, "This broker's id."),
    _Static("node.id", "broker_id", INT, "This broker's id (KRaft's name for it)."),
    _Static("auto.create.topics.enable", "auto_create_topics", BOOLEAN,
            "Metadata requests for an unknown topic create it."),
    _Static("num.partitions", "num_partitions", INT, "Partitions of an auto-created topic."),
    _Static("socket.request.max.bytes", "max_request_bytes", INT, "Largest request frame accepted."),
    _Static("producer.id.expiration.ms", "producer_id_expiration_ms", INT,
            "Idle time after which a producer's idempotence state is dropped."),
    _Static("producer.id.expiration.check.interval.ms", "producer_id_expiration_check_interval_ms", INT,
            "How often idle producer ids are expired."),
    _Static("offsets.topic.num.partitions", "groups.offsets_topic_partitions", INT,
            "Partitions of __consumer_offsets (fixed once it exists)."),
    _Static("offsets.topic.segment.bytes", "groups.offsets_topic_segment_bytes", INT,
            "segment.bytes of __consumer_offsets."),
    _Static("offsets.retention.minutes", "groups.offsets_retention_minutes", INT,
            "How long committed offsets of an empty group are kept."),
    _Static("offsets.retention.check.interval.ms", "groups.offsets_retention_check_interval_ms", LONG,
            "How often expired offsets are removed."),
    _Static("group.min.session.timeout.ms", "groups.min_session_timeout_ms", INT,
            "Smallest session timeout a classic-protocol member may ask for."),
    _Static("group.max.session.timeout.ms", "groups.max_session_timeout_ms", INT,
            "Largest session timeout a classic-protocol member may ask for."),
    _Static("group.initial.rebalance.delay.ms", "groups.initial_rebalance_delay_ms", INT,
            "How long a new classic group waits for more members before its first rebalance."),
    _Static("group.max.size", "groups.max_size", INT, "Most members a classic group may have."),
    _Static("group.consumer.session.timeout.ms", "groups.consumer_session_timeout_ms", INT,
            "Session timeout of consumer-protocol (KIP-848) members; a group may override it."),
    _Static("group.consumer.heartbeat.interval.ms", "groups.consumer_heartbeat_interval_ms", INT,
            "Heartbeat interval of consumer-protocol (KIP-848) members; a group may override it."),
    _Static("group.consumer.migration.policy", "groups.consumer_migration_policy", STRING,
            "Which conversions of non-empty groups between the classic and the consumer protocol are allowed: "
            "bidirectional, upgrade, downgrade or disabled (empty groups always convert)."),
    _Static("transaction.state.log.num.partitions", "transactions.state_topic_partitions", INT,
            "Partitions of __transaction_state (fixed once it exists)."),
    _Static("transaction.state.log.segment.bytes", "transactions.state_topic_segment_bytes", INT,
            "segment.bytes of __transaction_state."),
    _Static("transaction.max.timeout.ms", "transactions.max_timeout_ms", INT,
            "Largest transaction timeout a producer may ask for."),
    _Static("transaction.abort.timed.out.transaction.cleanup.interval.ms", "transactions.abort_check_interval_ms",
            INT, "How often transactions past their timeout are aborted."),
    _Static("transactional.id.expiration.ms", "transactions.id_expiration_ms", INT,
            "Idle time after which a transactional id is forgotten."),
    _Static("transaction.remove.expired.transaction.cleanup.interval.ms",
            "transactions.id_expiration_check_interval_ms", INT, "How often idle transactional ids are expired."),
    *(_Static(f"group.share.{name.replace('_', '.')}", f"share.{name}", INT, doc) for name, doc in (
        ("record_lock_duration_ms", "How long a share-group member holds the records it fetched; a group may "
                                    "override it."),
        ("min_record_lock_duration_ms", "Smallest share.record.lock.duration.ms a group may set."),
        ("max_record_lock_duration_ms", "Largest share.record.lock.duration.ms a group may set."),
        ("delivery_count_limit", "Deliveries of a record to a share group before it is archived; a group may "
                                 "override it."),
        ("partition_max_record_locks", "Most in-flight records of one partition per share group; a group may "
                                       "override it."),
        ("session_timeout_ms", "Session timeout of share-group members; a group may override it."),
        ("heartbeat_interval_ms", "Heartbeat interval of share-group members; a group may override it."),
        ("max_size", "Most members a share group may have."),
        ("max_share_sessions", "Most share sessions this broker keeps open."))),
    _Static("share.coordinator.state.topic.num.partitions", "share.state_topic_partitions", INT,
            "Partitions of __share_group_state (fixed once it exists)."),
    _Static("share.coordinator.state.topic.segment.bytes", "share.state_topic_segment_bytes", INT,
            "segment.bytes of __share_group_state."),
    _Static("share.coordinator.snapshot.update.records.per.snapshot", "share.snapshot_update_records_per_snapshot",
            INT, "ShareUpdate records of a share-partition between two ShareSnapshot records."),
    _Static("share.coordinator.state.topic.prune.interval.ms", "share.state_topic_prune_interval_ms", INT,
            "How often records of __share_group_state no share-partition needs are pruned."),
)
_DEFAULT_BROKER = BrokerConfig()


def _attr(config, path: str):
    for part in path.split("."):
        config = getattr(config, part)
    return config


def _format(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _static_entry(config: BrokerConfig, spec: _Static) -> ConfigEntry:
    value, default = _format(_attr(config, spec.path)), _format(_attr(_DEFAULT_BROKER, spec.path))
    synonyms = [Synonym(spec.name, value, STATIC_BROKER)] if value != default else []
    synonyms.append(Synonym(spec.name, default, DEFAULT))
    return _entry(spec.name, synonyms, spec.config_type, spec.doc, read_only=spec.read_only)


def broker_entries(broker, name: str) -> list[ConfigEntry]:
    """DescribeConfigs of BROKER `name`: "" (the cluster default) or this broker's id."""
    dynamic = broker.partitions.registry.broker_configs.get(CLUSTER_DEFAULT)
    if name == CLUSTER_DEFAULT:
        return [_entry(key, [Synonym(key, value, DYNAMIC_DEFAULT_BROKER)], _server_type(key), _server_doc(key))
                for key, value in sorted(dynamic.items())]
    _require_this_broker(broker, name)
    config: BrokerConfig = broker.config
    out = [_static_entry(config, spec) for spec in _STATIC]
    advertised = ",".join(f"{lsn.name}://{':'.join(map(str, config.endpoint_for(lsn.name)))}"
                          for lsn in config.bound_listeners)
    computed = (("listeners", format_listeners(config.bound_listeners), "Where this broker listens."),
                ("advertised.listeners", advertised, "Where clients are told to connect."),
                ("log.dirs", str(broker.layout.logs_dir.resolve()), "The log dir: <storage root>/log."))
    out += [_entry(key, [Synonym(key, value, STATIC_BROKER)], STRING, doc, read_only=True)
            for key, value, doc in computed]
    builtin = LogConfig().to_properties()
    for topic_name in LogConfig.property_names():
        server = LogConfig.server_synonym(topic_name)
        if server is None:
            continue
        synonyms = [Synonym(server, dynamic[server], DYNAMIC_DEFAULT_BROKER)] if server in dynamic else []
        synonyms.append(Synonym(server, builtin[topic_name], DEFAULT))
        out.append(_entry(server, synonyms, _topic_type(topic_name), _server_doc(server)))
    return sorted(out, key=lambda e: e.name)


def _server_type(server: str) -> int:
    topic_name = LogConfig.topic_config_of(server)
    return _topic_type(topic_name) if topic_name else STRING


def _server_doc(server: str) -> str | None:
    topic_name = LogConfig.topic_config_of(server)
    if topic_name is None:
        return None
    return f"Cluster-wide default of the topic config {topic_name}. {LogConfig.property_spec(topic_name).doc}"


def _require_this_broker(broker, name: str) -> None:
    if name != str(broker.broker_id):
        raise BrokerError(f"unexpected broker id {name!r}: this is broker {broker.broker_id}",
                          ErrorCode.invalid_request)


def validate_broker_defaults(values: dict[str, str]) -> None:
    """Only topic defaults (log.retention.ms, ...) are dynamic here; they must make a valid LogConfig."""
    unknown = sorted(key for key in values if LogConfig.topic_config_of(key) is None)
    if unknown:
        raise BrokerError(f"cannot update these configs dynamically: {', '.join(unknown)}", ErrorCode.invalid_request)
    LogConfig.from_properties(topic_defaults(values))


async def alter_broker(broker, name: str, updates: dict[str, str | None], replace: bool, validate_only: bool) -> None:
    if name != CLUSTER_DEFAULT:
        _require_this_broker(broker, name)
        raise BrokerError("topic defaults are cluster-wide here: alter the default broker resource (name \"\"), "
                          "not one broker", ErrorCode.invalid_request)
    store = broker.partitions.registry.broker_configs
    if validate_only:
        merged = {} if replace else store.get(CLUSTER_DEFAULT)
        merged.update(updates)
        validate_broker_defaults({k: v for k, v in merged.items() if v is not None})
        return
    store.update(CLUSTER_DEFAULT, updates, replace=replace, validate=validate_broker_defaults)
    await broker.partitions.apply_defaults()
    broker.leadership.configs_changed(None)  # the other brokers of a cluster apply them too


# ====================================================================== GROUP
def group_entries(broker, group_id: str) -> list[ConfigEntry]:
    configs = broker.groups.configs
    overrides = configs.overrides(group_id)
    out = []
    for name, spec in GROUP_SPECS.items():
        synonyms = [Synonym(name, overrides[name], GROUP_CONFIG)] if name in overrides else []
        synonyms.append(Synonym(name, configs.default(name), DEFAULT))
        out.append(_entry(name, synonyms, INT if spec.kind == "int" else STRING, spec.doc))
    return out


# ================================================================== dispatch
def describe(broker, resource_type: int, name: str, keys, *, with_synonyms: bool) -> list[ConfigEntry]:
    if resource_type == TOPIC:
        meta = broker.partitions.topic(name, fresh=True)
        entries = topic_entries(meta.config, meta.defaults)
    elif resource_type == BROKER:
        entries = broker_entries(broker, name)
    elif resource_type == GROUP:
        entries = group_entries(broker, name)
    else:
        raise BrokerError(f"resource type {resource_type} has no configs here", ErrorCode.invalid_request)
    if keys:
        wanted = set(keys)
        entries = [e for e in entries if e.name in wanted]
    return entries if with_synonyms else [dataclasses.replace(e, synonyms=()) for e in entries]


def current(broker, resource_type: int, name: str) -> dict[str, str]:
    """The resource's own (dynamic) values, as IncrementalAlterConfigs' APPEND/SUBTRACT start from."""
    if resource_type == TOPIC:
        meta = broker.partitions.topic(name, fresh=True)
        return {**meta.defaults, **meta.config}
    if resource_type == BROKER:
        return broker.partitions.registry.broker_configs.get(CLUSTER_DEFAULT)
    if resource_type == GROUP:
        return broker.groups.configs.overrides(name)
    return {}


def default_value(resource_type: int, key: str) -> str | None:
    if resource_type == TOPIC:
        return LogConfig().to_properties().get(key)
    if resource_type == BROKER and LogConfig.topic_config_of(key):
        return LogConfig().to_properties().get(LogConfig.topic_config_of(key))
    return None


def is_list(resource_type: int, key: str) -> bool:
    name = key if resource_type == TOPIC else LogConfig.topic_config_of(key) if resource_type == BROKER else None
    return name is not None and LogConfig.property_spec(name).kind == "list"


async def alter(broker, resource_type: int, name: str, updates: dict[str, str | None], *, replace: bool,
                validate_only: bool) -> None:
    if resource_type == TOPIC:
        meta = broker.partitions.topic(name, fresh=True)
        merged = {} if replace else dict(meta.config)
        merged.update(updates)
        LogConfig.from_properties({**meta.defaults, **{k: v for k, v in merged.items() if v is not None}})
        if not validate_only:
            meta = broker.partitions.registry.alter_config(name, updates, replace=replace)
            await broker.partitions.apply_config(meta)
            broker.leadership.configs_changed(name)  # the other brokers of a cluster apply it too
    elif resource_type == BROKER:
        await alter_broker(broker, name, updates, replace, validate_only)
    elif resource_type == GROUP:
        broker.groups.configs.alter(name, updates, replace=replace, validate_only=validate_only)
    else:
        raise BrokerError(f"resource type {resource_type} has no configs that can be altered here",
                          ErrorCode.invalid_request)


def listed(broker, resource_types) -> list[tuple[int, str]]:
    """ListConfigResources: (type, name) of every resource with configs, of the wanted types
    (all when none is named)."""
    wanted = set(resource_types) or {TOPIC, BROKER, GROUP}
    out: list[tuple[int, str]] = []
    if TOPIC in wanted:
        out += [(TOPIC, m.name) for m in broker.partitions.topics()]
    if BROKER in wanted:
        out.append((BROKER, str(broker.broker_id)))
    if GROUP in wanted:
        known = {g.group_id for g, _kind in broker.groups.list_groups()} | set(broker.groups.configs.group_ids())
        out += [(GROUP, gid) for gid in sorted(known)]
    return out

