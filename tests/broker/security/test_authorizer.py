"""StandardAuthorizer's rules: super users, deny wins, implied operations, prefixes and `*`,
hosts, the no-ACL rule, and authorizeByResourceType."""

from __future__ import annotations

from topiclake.broker.security.authorizer import AclAuthorizer
from topiclake.broker.security.config import SecurityConfig
from topiclake.security.acls import AclBinding, AclStore, Operation, PatternType, Permission, ResourceType

T, G = ResourceType.TOPIC, ResourceType.GROUP
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE


def acl(name, principal="User:alice", op=R, permission=Permission.ALLOW, pattern=PatternType.LITERAL, host="*",
        rtype=T):
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def authorizer(tmp_path, *bindings, **config):
    store = AclStore(tmp_path)
    store.add(bindings)
    return AclAuthorizer(SecurityConfig(authorizer="acl", **config), store)


def test_allow_deny_implied_and_patterns(tmp_path):
    a = authorizer(tmp_path, acl("orders"), acl("ord", op=W, pattern=PatternType.PREFIXED),
                   acl("orders", op=W, permission=Permission.DENY), acl("*", principal="User:*", op=D))
    assert a.authorize("User:alice", "10.0.0.1", R, T, "orders")
    assert not a.authorize("User:alice", "10.0.0.1", W, T, "orders")  # DENY beats the prefixed ALLOW
    assert a.authorize("User:alice", "10.0.0.1", W, T, "ordinary")
    assert a.authorize("User:alice", "10.0.0.1", D, T, "ordinary")  # WRITE implies DESCRIBE
    assert a.authorize("User:bob", "10.0.0.1", D, T, "anything")  # User:* on *
    assert not a.authorize("User:bob", "10.0.0.1", R, T, "orders")
    assert not a.authorize("User:alice", "10.0.0.1", R, G, "orders")  # another resource type


def test_hosts_super_users_and_the_no_acl_rule(tmp_path):
    a = authorizer(tmp_path, acl("orders", host="10.0.0.1"), super_users=("User:admin",))
    assert a.authorize("User:alice", "10.0.0.1", R, T, "orders")
    assert not a.authorize("User:alice", "10.0.0.2", R, T, "orders")
    assert a.authorize("User:admin", "10.0.0.2", Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
    assert not a.authorize("User:alice", "10.0.0.1", R, T, "no-acls")
    assert authorizer(tmp_path / "open", allow_everyone_if_no_acl_found=True).authorize(
        "User:alice", "10.0.0.1", R, T, "no-acls")


def test_acls_written_by_another_process_apply_at_once(tmp_path):
    a = authorizer(tmp_path)
    assert not a.authorize("User:alice", "h", R, T, "orders")
    AclStore(tmp_path).add([acl("orders")])
    assert a.authorize("User:alice", "h", R, T, "orders")


def test_authorize_any_and_authorized_operations(tmp_path):
    a = authorizer(tmp_path, acl("pre", op=W, pattern=PatternType.PREFIXED),
                   acl("pre", op=W, permission=Permission.DENY, pattern=PatternType.PREFIXED, principal="User:carol"),
                   acl("pre", op=W, pattern=PatternType.PREFIXED, principal="User:carol"))
    assert a.authorize_any("User:alice", "h", W, T)
    assert not a.authorize_any("User:carol", "h", W, T)  # its only ALLOW is covered by a DENY
    assert not a.authorize_any("User:bob", "h", W, T)
    bits = a.authorized_operations("User:alice", "h", T, "prefix")
    assert bits == (1 << W) | (1 << D)
