"""ACL filters (Kafka's ResourcePatternFilter / AccessControlEntryFilter rules), validation of new
bindings, and the store in shared storage."""

from __future__ import annotations

import pytest

from topiclake.security.acls import (
    AclBinding,
    AclError,
    AclFilter,
    AclStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate_new_binding,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def b(rtype=T, name="orders", pattern=LIT, principal="User:alice", host="*", op=Operation.READ,
      permission=Permission.ALLOW):
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def test_filters_match_as_kafka_does():
    literal, wildcard, prefixed = b(), b(name="*"), b(name="ord", pattern=PRE)
    match = AclFilter(T, "orders", PatternType.MATCH)
    assert all(match.matches(x) for x in (literal, wildcard, prefixed))
    assert not match.matches(b(name="ordersX")) and not match.matches(b(name="x", pattern=PRE))
    assert AclFilter(T, "ord", PatternType.ANY).matches(prefixed) and not AclFilter(T, "ord").matches(literal)
    assert AclFilter(pattern_type=PRE).matches(prefixed) and not AclFilter(pattern_type=PRE).matches(literal)
    assert not AclFilter(G).matches(literal)
    assert AclFilter(principal="User:alice", operation=Operation.READ).matches(literal)
    assert not AclFilter(permission=Permission.DENY).matches(literal)
    with pytest.raises(AclError):
        AclFilter(resource_type=ResourceType.UNKNOWN).validate()


@pytest.mark.parametrize("binding, message", [
    (b(rtype=ResourceType.ANY), "Invalid resourceType"),
    (b(pattern=PatternType.MATCH), "Invalid patternType"),
    (b(op=Operation.ANY), "Invalid operation"),
    (b(permission=Permission.ANY), "Invalid permissionType"),
    (b(name=""), "Resource name should not be empty"),
    (b(rtype=C, name="other"), "kafka-cluster"),
    (b(principal="alice"), "no colon"),
])
def test_new_bindings_are_validated(binding, message):
    with pytest.raises(AclError, match=message):
        validate_new_binding(binding)


def test_store_adds_removes_and_is_seen_by_another_reader(tmp_path):
    store, other = AclStore(tmp_path), AclStore(tmp_path)
    group_name = "odd: name with spaces"
    store.add([b(), b(op=Operation.WRITE), b(rtype=G, name=group_name, principal="User:CN=a b,O=x")])
    assert len(other.bindings()) == 3
    assert b(rtype=G, name=group_name, principal="User:CN=a b,O=x") in other.bindings()
    [removed] = other.remove([AclFilter(T, "orders", operation=Operation.WRITE)])
    assert removed == [b(op=Operation.WRITE)]
    assert store.bindings() == (b(), b(rtype=G, name=group_name, principal="User:CN=a b,O=x"))
    assert oct(store.path.stat().st_mode & 0o777) == "0o600"
