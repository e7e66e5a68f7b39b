"""Client quotas (KIP-546): what DescribeClientQuotas/AlterClientQuotas read and write, stored in
<root>/cluster/client-quotas.json with Kafka's validation (ClientQuotaControlManager).

An entity is a set of (type, name) pairs: user, client-id, user + client-id, or ip; a None name
is that type's default entity. User and client-id entities take producer_byte_rate,
consumer_byte_rate (whole numbers), request_percentage and controller_mutation_rate; ip entities
connection_creation_rate.

throttle.py enforces them (throttle_time_ms and channel muting, THROTTLING_QUOTA_EXCEEDED, held
connections), as Kafka's quota managers do.
"""

from __future__ import annotations

import ipaddress
import json
import time
from dataclasses import dataclass
from typing import Callable

from kio.schema.errors import ErrorCode

from topiclake.segments.config_store import ConfigStore
from topiclake.segments.storage import StorageLayout

from .errors import BrokerError

USER, CLIENT_ID, IP = "user", "client-id", "ip"
_CLIENT_KEYS = {"producer_byte_rate": int, "consumer_byte_rate": int, "request_percentage": float,
                "controller_mutation_rate": float}
_IP_KEYS = {"connection_creation_rate": int}
RECHECK_S = 1.0  # how often the enforcement looks for changes to the quota file
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = frozenset[tuple[str, str | None]]


class InvalidQuota(BrokerError):
    code = ErrorCode.invalid_request


def _keys_for(entity: Entity) -> dict[str, type]:
    """Check an entity's types (Kafka's validateEntity / configKeysForEntityType); its quota keys."""
    types = [t for t, _ in entity]
    if not types:
        raise InvalidQuota("invalid empty client quota entity")
    for entity_type, name in entity:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidQuota(f"unhandled client quota entity type: {entity_type}")
        if name == "":
            raise InvalidQuota(f"empty {entity_type} not supported")
    if len(set(types)) != len(types):
        raise InvalidQuota(f"entity type repeated in {sorted(types)}")
    if IP in types:
        if len(types) > 1:
            raise InvalidQuota("invalid quota entity combination: an ip entity cannot be combined with user or "
                               "client-id")
        name = dict(entity)[IP]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise InvalidQuota(f"{name} is not a valid IP") from None
        return _IP_KEYS
    return _CLIENT_KEYS


def _check_value(keys: dict[str, type], key: str, value: float) -> None:
    kind = keys.get(key)
    if kind is None:
        raise InvalidQuota(f"invalid configuration key {key}")
    if kind is int and abs(round(value) - value) > 1e-6:
        raise InvalidQuota(f"configuration {key} must be a Long value")


def _name(entity: Entity) -> str:
    return json.dumps(sorted(entity, key=lambda pair: pair[0]))


def _entity(name: str) -> Entity:
    return frozenset((t, n) for t, n in json.loads(name))


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


class ClientQuotas:
    def __init__(self, layout: StorageLayout, clock: Callable[[], float] = time.monotonic):
        self.store = ConfigStore(layout.cluster_dir / "client-quotas.json")
        self._memo: tuple[object, dict[Entity, dict[str, float]]] = (None, {})
        self._clock = clock
        self._checked_until = 0.0  # the file is not looked at again before this (clock seconds)

    def entities(self) -> dict[Entity, dict[str, float]]:
        """Every entity's quotas, derived once per version of the file, which is looked at (one
        stat) at most every RECHECK_S: the enforcement asks several times a request, and a
        stat each made a tenth of a produce's cost with 2,000 partitions. A change through
        `alter` applies at once; another process's (a bucket's mirror) within RECHECK_S, as
        Kafka's brokers apply quota changes when their metadata catches up. Do not modify what
        it returns."""
        now = self._clock()
        if now < self._checked_until:
            return self._memo[1]
        configs = self.store.snapshot()
        if self._memo[0] is not configs:
            self._memo = (configs, {_entity(name): {k: float(v) for k, v in values.items()}
                                    for name, values in configs.items()})
        self._checked_until = now + RECHECK_S
        return self._memo[1]

    def alter(self, entity: Entity, ops: list[tuple[str, float | None]], *, validate_only: bool = False) -> None:
        """Set (a value) or remove (None) quotas of one entity; all or nothing."""
        keys = _keys_for(entity)
        for key, value in ops:
            if value is not None:
                _check_value(keys, key, value)
        if not validate_only:
            self.store.update(_name(entity), {key: None if value is None else repr(float(value)) for key, value in ops})
            self._checked_until = 0.0

    def describe(self, components: list[FilterComponent], strict: bool) -> dict[Entity, dict[str, float]]:
        """The entities matching every component (strict: and having no other entity type)."""
        types = [c.entity_type for c in components]
        for c in components:
            if c.entity_type not in (USER, CLIENT_ID, IP):
                raise InvalidQuota(f"custom entity type {c.entity_type!r} not supported")
        if len(set(types)) != len(types):
            raise InvalidQuota(f"duplicate filter component entity type in {types}")
        if IP in types and len(types) > 1:
            raise InvalidQuota("an ip filter component cannot be combined with user or client-id ones")
        out = {}
        for name, values in self.store.all().items():
            entity = _entity(name)
            names = dict(entity)
            if all(c.entity_type in names and _matches(c, names[c.entity_type]) for c in components) and \
                    (not strict or set(names) <= set(types)):
                out[entity] = {k: float(v) for k, v in values.items()}
        return out


def _matches(component: FilterComponent, name: str | None) -> bool:
    if component.match_type == MATCH_EXACT:
        return name == component.match
    if component.match_type == MATCH_DEFAULT:
        return name is None
    return True  # MATCH_ANY: every entity of the type, the default one included
