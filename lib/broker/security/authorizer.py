"""The ACL authorizer, with Kafka's StandardAuthorizer rules.

For a principal from a host wanting an operation on a resource:
1. a super user may do everything;
2. the ACLs that apply are those of the resource's type whose pattern matches its name: LITERAL
   with the same name or `*`, PREFIXED with a prefix of it;
3. a DENY entry for the principal (or User:*), the host (or *) and the operation (or ALL) wins;
4. else an ALLOW entry for the operation, ALL, or an operation that implies it (READ, WRITE,
   DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
5. else, when no ACL at all applies to the resource, `allow_everyone_if_no_acl_found` decides;
   otherwise the answer is no.

ACLs come from the AclStore in shared storage; the index is rebuilt when the file changes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from topiclake.security.acls import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

from .config import SecurityConfig

_IMPLIED_BY = {Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
               Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS}}
# The operations each resource type has (Kafka's AclEntry.supportedOperations): authorized_operations.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE, Operation.TWO_PHASE_COMMIT),
}


@dataclass(frozen=True, slots=True)
class _Index:
    literal: dict  # (type, name) -> [binding]
    prefixed: dict  # type -> [binding]
    by_type: dict  # type -> [binding]

    @classmethod
    def build(cls, bindings: tuple[AclBinding, ...]) -> "_Index":
        literal, prefixed, by_type = defaultdict(list), defaultdict(list), defaultdict(list)
        for b in bindings:
            by_type[b.resource_type].append(b)
            if b.pattern_type == PatternType.LITERAL:
                literal[(b.resource_type, b.resource_name)].append(b)
            else:
                prefixed[b.resource_type].append(b)
        return cls(dict(literal), dict(prefixed), dict(by_type))

    def applying(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        out = self.literal.get((rtype, name), []) + self.literal.get((rtype, WILDCARD), [])
        out += [b for b in self.prefixed.get(rtype, ()) if name.startswith(b.resource_name)]
        return out


def _entry_applies(b: AclBinding, principal: str, host: str) -> bool:
    return b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (WILDCARD, host)


class AclAuthorizer:
    def __init__(self, config: SecurityConfig, store: AclStore):
        self.config = config
        self.store = store
        self._index: tuple[tuple, _Index] | None = None

    def _current(self) -> _Index:
        bindings = self.store.bindings()  # cached by the store while its file is unchanged
        if self._index is None or self._index[0] is not bindings:
            self._index = (bindings, _Index.build(bindings))
        return self._index[1]

    def authorize(self, principal: str, host: str, operation: Operation, rtype: ResourceType, name: str) -> bool:
        if self.config.is_super_user(principal):
            return True
        acls = self._current().applying(rtype, name)
        if not acls:
            return self.config.allow_everyone_if_no_acl_found
        mine = [b for b in acls if _entry_applies(b, principal, host)]
        if any(b.permission == Permission.DENY and b.operation in (operation, Operation.ALL) for b in mine):
            return False
        allowing = {operation, Operation.ALL} | _IMPLIED_BY.get(operation, set())
        return any(b.permission == Permission.ALLOW and b.operation in allowing for b in mine)

    def authorize_any(self, principal: str, host: str, operation: Operation, rtype: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: may the principal do `operation` on at least one
        resource of the type (an ALLOW pattern that no DENY covers)? Used for idempotent producers."""
        if self.authorize(principal, host, operation, rtype, "\0no-such-resource"):
            return True  # super user, a `*` ALLOW, or no ACL with allow_everyone_if_no_acl_found
        mine = [b for b in self._current().by_type.get(rtype, ()) if _entry_applies(b, principal, host)
                and b.operation in (operation, Operation.ALL)]
        denies = [b for b in mine if b.permission == Permission.DENY]
        if any(b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD for b in denies):
            return False

        def denied(allow: AclBinding) -> bool:
            for d in denies:
                if d.pattern_type == PatternType.PREFIXED and allow.resource_name.startswith(d.resource_name):
                    return True
                if (d.pattern_type == PatternType.LITERAL and allow.pattern_type == PatternType.LITERAL
                        and d.resource_name == allow.resource_name):
                    return True
            return False

        return any(b.permission == Permission.ALLOW and not denied(b) for b in mine)

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """The bit field of Kafka's *_authorized_operations fields (bit n = operation code n)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << op.value
        return bits
