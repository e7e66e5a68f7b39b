"""ACLs as Kafka models them (org.apache.kafka.common.acl / resource), and their store in shared
storage: <root>/cluster/acls.json.

A binding is a resource pattern (type, name, LITERAL or PREFIXED) plus an access control entry
(principal, host, operation, ALLOW or DENY). Filters (DescribeAcls, DeleteAcls, `topiclake acls
list|remove`) match bindings with Kafka's ResourcePatternFilter / AccessControlEntryFilter rules,
MATCH included. New bindings are validated as Kafka's AclControlManager does.

The file is a `ConfigStore` (flock + atomic writes): one named set per resource pattern
("TOPIC:LITERAL:orders"), one key per entry ("ALLOW READ * User:alice"). The broker re-reads it
when it changes (one stat per authorization), so ACLs added by the admin API or by `topiclake
acls add --data` take effect without a restart.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from topiclake.segments.config_store import ConfigStore
from topiclake.segments.storage import StorageLayout

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"  # a literal resource name matching every resource, or any host
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class AclError(ValueError):
    """A binding or filter Kafka would refuse with INVALID_REQUEST."""


def parse_enum(kind: type[enum.IntEnum], value: str | int) -> enum.IntEnum:
    """An enum member from its Kafka name (READ, ClusterAction, cluster-action, ...) or code."""
    if isinstance(value, int):
        try:
            return kind(value)
        except ValueError:
            return kind(0)  # UNKNOWN, as Kafka's fromCode
    key = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", value.strip()).upper().replace("-", "_")
    try:
        return kind[key]
    except KeyError:
        names = ", ".join(m.name for m in kind if m.value > 1)
        raise AclError(f"unknown {kind.__name__} {value!r}: one of {names}") from None


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def describe(self) -> str:
        return (f"{self.permission.name} {self.principal} from {self.host} {self.operation.name} "
                f"{self.resource_type.name}:{self.pattern_type.name}:{self.resource_name}")


def validate_new_binding(b: AclBinding) -> None:
    """Kafka's AclControlManager.validateNewAcl (+ the CLUSTER name rule of its authorizers)."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclError(f"Invalid resourceType {b.resource_type.name}")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid patternType {b.pattern_type.name}")
    if b.operation in (Operation.ANY, Operation.UNKNOWN):
        raise AclError(f"Invalid operation {b.operation.name}")
    if b.permission not in (Permission.DENY, Permission.ALLOW):
        raise AclError(f"Invalid permissionType {b.permission.name}")
    if not b.resource_name:
        raise AclError("Resource name should not be empty")
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if ":" not in b.principal:
        raise AclError(f"Could not parse principal from `{b.principal}` (no colon is present separating the "
                       "principal type from the principal name)")
    if not b.host:
        raise AclError("Host should not be empty (use * for any host)")


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value.value == 0:
                raise AclError(f"Invalid filter: {type(value).__name__} UNKNOWN")
        if self.pattern_type == PatternType.MATCH and self.resource_name is None:
            raise AclError("a MATCH filter needs a resource name")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, b.pattern_type):
                if self.resource_name != b.resource_name:
                    return False
            elif b.pattern_type == PatternType.LITERAL:
                if b.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(b.resource_name):
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and self.operation in (Operation.ANY, b.operation)
                and self.permission in (Permission.ANY, b.permission))


def acls_path(root: str | Path) -> Path:
    return StorageLayout(root).cluster_dir / "acls.json"


def _stamp(path: Path) -> tuple:
    """Changes whenever the file is replaced (atomic writes rename a new inode into place)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ()
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _resource_key(b: AclBinding) -> str:
    return f"{b.resource_type.name}:{b.pattern_type.name}:{b.resource_name}"


def _entry_key(b: AclBinding) -> str:
    return f"{b.permission.name} {b.operation.name} {b.host} {b.principal}"


class AclStore:
    def __init__(self, root: str | Path):
        self._store = ConfigStore(acls_path(root))
        self._cache: tuple[tuple, tuple[AclBinding, ...]] | None = None

    @property
    def path(self) -> Path:
        return self._store.path

    def bindings(self) -> tuple[AclBinding, ...]:
        """Every binding, sorted (a cached parse while the file is unchanged)."""
        stamp = _stamp(self.path)
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        out = []
        for resource, entries in self._store.all().items():
            rtype, pattern, name = resource.split(":", 2)
            for entry in entries:
                permission, operation, host, principal = entry.split(" ", 3)
                out.append(AclBinding(ResourceType[rtype], name, PatternType[pattern], principal, host,
                                      Operation[operation], Permission[permission]))
        result = tuple(sorted(out))
        self._cache = (stamp, result)
        return result

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Store new bindings (validated first; an existing one is kept as is)."""
        by_resource: dict[str, dict[str, str]] = {}
        for b in bindings:
            validate_new_binding(b)
            by_resource.setdefault(_resource_key(b), {})[_entry_key(b)] = ""
        for resource, entries in by_resource.items():
            self._store.update(resource, entries)

    def remove(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """Delete the bindings each filter matches; per filter, the bindings it deleted."""
        filters = list(filters)
        for f in filters:
            f.validate()
        current = self.bindings()
        matched = [[b for b in current if f.matches(b)] for f in filters]
        doomed: dict[str, dict[str, None]] = {}
        for b in {b for group in matched for b in group}:
            doomed.setdefault(_resource_key(b), {})[_entry_key(b)] = None
        for resource, entries in doomed.items():
            self._store.update(resource, entries)
        return matched

    def find(self, f: AclFilter) -> list[AclBinding]:
        f.validate()
        return [b for b in self.bindings() if f.matches(b)]
