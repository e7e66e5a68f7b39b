"""A bucket root's metadata is in the bucket when the request that changed it is answered: a
topic created, its config altered and an ACL added, then kill -9 at once, are all there for a
broker started on a new empty cache directory."""

from __future__ import annotations

from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourcePatternType, ResourceType)

TOPIC = "made-then-killed"


def test_admin_changes_answered_are_in_the_bucket_for_the_next_broker(bucket_brokers):
    first = bucket_brokers.start("first")
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("retention.ms", "4242", incremental_operation=AlterConfigOpType.SET)])
    next(iter(admin.incremental_alter_configs([resource]).values())).result(30)
    acl = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    admin.create_acls([acl])[acl].result(30)
    first.kill()  # at once: no flush tick is waited for

    second = bucket_brokers.start("second")
    admin = AdminClient({"bootstrap.servers": second.bootstrap})
    topics = admin.list_topics(timeout=30).topics
    assert TOPIC in topics and len(topics[TOPIC].partitions) == 3
    config = next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, TOPIC)]).values())).result(30)
    assert config["retention.ms"].value == "4242"
    wanted = AclBindingFilter(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(wanted).result(30)
    assert [(b.name, b.principal, b.operation) for b in found] == [(TOPIC, "User:alice", AclOperation.READ)]
