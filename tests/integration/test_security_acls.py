"""The ACL authorizer with real clients (issue 13), and what else learns the principal: quotas and
the schema registry's basic auth.

One broker: SASL_PLAINTEXT and SSL (client certificates requested) listeners, `authorizer =
"acl"`, super user admin, the schema registry on. Users admin and bob are set offline before the
start. bob, with no ACL, can neither produce, consume, commit nor describe; ACLs granted through
the admin API let him without a restart; a DENY wins over an ALLOW.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from tests.support.paths import REPO
from tests.support.secure_broker import SecureBroker, make_certificates, security_toml
from tests.support.clients import commit_offsets

pytestmark = pytest.mark.slow

USERS = {"admin": "admin-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("security-acls")
    certs = make_certificates(tmp / "certs")
    toml = '[registry]\nlisten = "127.0.0.1:0"\n' + security_toml(certs, authorizer='"acl"', super_users='["User:admin"]')
    proc = SecureBroker(tmp, ("SASL_PLAINTEXT", "SSL"), toml, users=USERS).start()
    proc.certs, proc.tmp = certs, tmp
    from topiclake.security.client_config import ClientSecurity

    proc.wait_for_groups(ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "admin", USERS["admin"]))
    admin = AdminClient(sasl(proc, "admin"))
    admin.create_topics([_new_topic("orders"), _new_topic("other")])["orders"].result(10)
    producer = Producer(sasl(proc, "admin"))
    for i in range(3):
        producer.produce("orders", f"o{i}".encode())
    assert producer.flush(10) == 0
    try:
        yield proc
    finally:
        proc.stop()


def _new_topic(name):
    from confluent_kafka.admin import NewTopic

    return NewTopic(name, 1)


def sasl(acl_broker, user: str, password: str | None = None, **extra) -> dict:
    return {"bootstrap.servers": acl_broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
            "sasl.password": password or USERS[user], **extra}


def produce_error(conf: dict, topic: str):
    """None when the record was acknowledged, else its delivery error."""
    outcome = []
    producer = Producer({**conf, "message.timeout.ms": 5000})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(10)
    return outcome[0] if outcome else "no delivery report"


def consume_error(conf: dict, topic: str, group: str):
    """(records read, the first error): a group member (subscribe) reading from the start."""
    errors = []
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "error_cb": errors.append})
    try:
        consumer.subscribe([topic])
        got, deadline = [], time.monotonic() + 15
        while time.monotonic() < deadline and len(got) < 3:
            message = consumer.poll(0.3)
            if errors:
                return got, errors[0]
            if message is None:
                continue
            if message.error():
                return got, message.error()
            got.append(message.value())
        return got, None
    finally:
        consumer.close()


def commit_error(conf: dict, topic: str, group: str):
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        commit_offsets(consumer, [TopicPartition(topic, 0, 1)])
        return None
    except KafkaException as exc:
        return exc.args[0]
    finally:
        consumer.close()


def describe_error(conf: dict, topic: str):
    metadata = AdminClient(conf).list_topics(topic=topic, timeout=10)
    return metadata.topics[topic].error


def acl(resource_type, name, principal, operation, permission=AclPermissionType.ALLOW,
        pattern=ResourcePatternType.LITERAL):
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def test_no_acl_no_access_then_granted_without_restart_and_deny_wins(acl_broker):
    bob = sasl(acl_broker, "bob")
    admin = AdminClient(sasl(acl_broker, "admin"))
    assert produce_error(bob, "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consume_error(bob, "orders", "g-bob")[1].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert describe_error(bob, "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "orders" not in AdminClient(bob).list_topics(timeout=10).topics  # Metadata hides it
    _assert_each_api_refuses(acl_broker)

    grants = [acl(ResourceType.TOPIC, "orders", "User:bob", AclOperation.WRITE),
              acl(ResourceType.TOPIC, "orders", "User:bob", AclOperation.READ),
              acl(ResourceType.GROUP, "g-bob", "User:bob", AclOperation.READ)]
    for future in admin.create_acls(grants).values():
        future.result(10)

    assert produce_error(bob, "orders") is None
    got, error = consume_error(bob, "orders", "g-bob")
    assert error is None and got == [b"o0", b"o1", b"o2"]
    assert commit_error(bob, "orders", "g-bob") is None
    assert describe_error(bob, "orders") is None  # READ implies DESCRIBE
    assert set(AdminClient(bob).list_topics(timeout=10).topics) == {"orders"}

    # ListGroups hides the groups bob may not describe.
    assert commit_error(sasl(acl_broker, "admin"), "orders", "g-admin") is None
    assert _listed_groups(acl_broker, "admin") >= {"g-admin", "g-bob"}
    assert _listed_groups(acl_broker, "bob") == {"g-bob"}

    deny = acl(ResourceType.TOPIC, "ord", "User:bob", AclOperation.READ, AclPermissionType.DENY,
               ResourcePatternType.PREFIXED)
    admin.create_acls([deny])[deny].result(10)
    assert consume_error(bob, "orders", "g-bob")[1].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(bob, "orders") is None  # the DENY is for READ only
    assert admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, None, None,
                                               AclOperation.ANY, AclPermissionType.ANY)])
    described = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob",
                                                     None, AclOperation.ANY, AclPermissionType.ANY)).result(10)
    assert sorted((b.restype.value, b.operation.value) for b in described) == sorted(
        [(ResourceType.TOPIC.value, AclOperation.READ.value), (ResourceType.TOPIC.value, AclOperation.WRITE.value),
         (ResourceType.GROUP.value, AclOperation.READ.value)])


def _listed_groups(acl_broker, user: str) -> set[str]:
    from kio.schema.list_groups.v4 import request as lg

    from topiclake.client.conn import BrokerConnection
    from topiclake.security.client_config import ClientSecurity

    with BrokerConnection(acl_broker.address("SASL_PLAINTEXT"), timeout=10,
                        security=ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", user, USERS[user])) as client:
        return {g.group_id for g in client.request(lg.ListGroupsRequest(states_filter=())).groups}


def _assert_each_api_refuses(acl_broker):
    """The broker's own answers to bob, API by API (what the clients above turned into errors)."""
    from kio.schema.fetch.v12 import request as fe
    from kio.schema.list_offsets.v7 import request as lo
    from kio.schema.offset_commit.v8 import request as oc
    from kio.schema.offset_fetch.v7 import request as of

    from tests.support.wire import offset_for_epoch
    from topiclake.client.conn import BrokerConnection
    from topiclake.security.client_config import ClientSecurity

    with BrokerConnection(acl_broker.address("SASL_PLAINTEXT"), timeout=10,
                        security=ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", USERS["bob"])) as bob:
        fetched = bob.request(fe.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=(fe.FetchTopic(topic="orders", partitions=(fe.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id=""))
        assert fetched.responses[0].partitions[0].error_code.name == "topic_authorization_failed"
        assert not fetched.responses[0].partitions[0].records
        listed = bob.request(lo.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(lo.ListOffsetsTopic(
            name="orders", partitions=(lo.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                               timestamp=-1),)),)))
        assert listed.topics[0].partitions[0].error_code.name == "topic_authorization_failed"
        ended = offset_for_epoch(bob, "orders", 0)  # OffsetForLeaderEpoch needs DESCRIBE too
        assert (ended.error_code.name, ended.end_offset) == ("topic_authorization_failed", -1)
        committed = bob.request(oc.OffsetCommitRequest(
            group_id="g-bob", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=(oc.OffsetCommitRequestTopic(name="orders", partitions=(oc.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None),)),)))
        assert committed.topics[0].partitions[0].error_code.name == "group_authorization_failed"
        offsets = bob.request(of.OffsetFetchRequest(group_id="g-bob", topics=None, require_stable=False))
        assert offsets.error_code.name == "group_authorization_failed"


def _share_api_codes(acl_broker) -> dict[str, str]:
    """bob's answers from the share-group APIs, by what was asked (READ on group s-bob only)."""
    from kio.schema.consumer_group_heartbeat.v1 import request as chb
    from kio.schema.delete_share_group_offsets.v0 import request as dso
    from kio.schema.describe_share_group_offsets.v0 import request as ds
    from kio.schema.share_group_describe.v1 import request as sd
    from kio.schema.share_group_heartbeat.v1 import request as hb

    from topiclake.client.conn import BrokerConnection
    from topiclake.security.client_config import ClientSecurity

    codes = {}
    with BrokerConnection(acl_broker.address("SASL_PLAINTEXT"), timeout=10,
                        security=ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", USERS["bob"])) as bob:
        for group in ("s-bob", "s-carol"):
            beat = bob.request(hb.ShareGroupHeartbeatRequest(group_id=group, member_id="m" * 22, member_epoch=0,
                                                             rack_id=None, subscribed_topic_names=("other",)))
            codes[f"heartbeat {group}"] = beat.error_code.name
            described = bob.request(sd.ShareGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False))
            codes[f"describe {group}"] = described.groups[0].error_code.name
        offsets = bob.request(ds.DescribeShareGroupOffsetsRequest(groups=(ds.DescribeShareGroupOffsetsRequestGroup(
            group_id="s-bob", topics=(ds.DescribeShareGroupOffsetsRequestTopic(topic_name="other", partitions=(0,)),)),)))
        [group] = offsets.groups  # the group may be described; the topic's partitions are refused
        assert group.error_code == ErrorCode.none and [t.topic_name for t in group.topics] == ["other"]
        codes["offsets s-bob other"] = group.topics[0].partitions[0].error_code.name
        deleted = bob.request(dso.DeleteShareGroupOffsetsRequest(group_id="s-bob", topics=(
            dso.DeleteShareGroupOffsetsRequestTopic(topic_name="other"),)))
        codes["delete offsets s-bob"] = deleted.error_code.name  # DELETE on the group, not READ
        beat = bob.request(chb.ConsumerGroupHeartbeatRequest(
            group_id="c-bob", member_id="m" * 22, member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=("other",),
            server_assignor=None, topic_partitions=()))
        codes["consumer heartbeat c-bob"] = beat.error_code.name
    return codes


def _share_poll(acl_broker, user: str, group: str, topic: str, seconds: float = 15) -> tuple[list, list]:
    """(records, errors) a ShareConsumer of `user` gets within `seconds` (errors end the wait). A
    share group starts at the log end (share.auto.offset.reset=latest): admin produces while it polls."""
    from confluent_kafka import ShareConsumer

    sc = ShareConsumer({**sasl(acl_broker, user), "group.id": group})
    sc.subscribe([topic])
    producer = Producer(sasl(acl_broker, "admin"))
    got, errors = [], []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not got and not errors:
            producer.produce(topic, b"shared")
            producer.flush(5)
            try:
                for m in sc.poll(timeout=0.5):
                    (errors if m.error() is not None else got).append(m.error() or m.value())
            except KafkaException as exc:
                errors.append(exc.args[0])
    finally:
        sc.close()
    return got, errors


def test_share_groups_need_read_on_the_group_and_the_topic(acl_broker):
    got, errors = _share_poll(acl_broker, "bob", "s-bob", "other")
    assert not got and errors and errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, errors

    admin = AdminClient(sasl(acl_broker, "admin"))
    grant = acl(ResourceType.GROUP, "s-bob", "User:bob", AclOperation.READ)
    admin.create_acls([grant])[grant].result(10)
    # The heartbeat answers TOPIC_AUTHORIZATION_FAILED; librdkafka keeps it to itself and retries.
    got, errors = _share_poll(acl_broker, "bob", "s-bob", "other", seconds=6)
    assert not got and all(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors
    assert _share_api_codes(acl_broker) == {"heartbeat s-bob": "topic_authorization_failed",
                                        "heartbeat s-carol": "group_authorization_failed",
                                        "describe s-bob": "group_id_not_found", "describe s-carol": "group_authorization_failed",
                                        "offsets s-bob other": "topic_authorization_failed",
                                        "delete offsets s-bob": "group_authorization_failed",
                                        "consumer heartbeat c-bob": "group_authorization_failed"}

    grant = acl(ResourceType.TOPIC, "other", "User:bob", AclOperation.READ)
    admin.create_acls([grant])[grant].result(10)
    got, errors = _share_poll(acl_broker, "bob", "s-bob", "other")
    assert got and set(got) == {b"shared"} and not errors


def test_a_client_certificate_subject_is_the_principal(acl_broker):
    certs = acl_broker.certs
    tls = {"bootstrap.servers": acl_broker.address("SSL"), "security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}
    with_cert = {**tls, "ssl.certificate.location": str(certs.client_cert),
                 "ssl.key.location": str(certs.client_key)}
    assert produce_error(with_cert, "other").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant = acl(ResourceType.TOPIC, "other", certs.client_principal, AclOperation.WRITE)
    admin = AdminClient(sasl(acl_broker, "admin"))
    admin.create_acls([grant])[grant].result(10)
    assert produce_error(with_cert, "other") is None
    assert produce_error(tls, "other").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # no certificate: ANONYMOUS


def test_scram_credentials_through_the_admin_api(acl_broker):
    admin = AdminClient(sasl(acl_broker, "admin"))
    carol = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                         b"carol-secret")
    admin.alter_user_scram_credentials([carol])["carol"].result(10)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(10)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    carol_conf = sasl(acl_broker, "carol", "carol-secret", **{"sasl.mechanism": "SCRAM-SHA-512"})
    assert AdminClient(carol_conf).list_topics(timeout=10).topics == {}  # logged in; may describe nothing
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        bob = AdminClient(sasl(acl_broker, "bob"))
        bob.describe_user_scram_credentials(["carol"])["carol"].result(10)


def _cli(*args, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "topiclake.cli", *args], capture_output=True, text=True, cwd=REPO,
                            timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_cli_over_the_protocol_and_offline_acls_take_effect_at_once(acl_broker):
    props = acl_broker.tmp / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config="
                     "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" "
                     f"password=\"{USERS['admin']}\";\n")
    remote = ("--bootstrap", acl_broker.address("SASL_PLAINTEXT"), "--command-config", str(props))
    _cli("users", "set", "dave", "--password", "dave-secret", "--mechanism", "SCRAM-SHA-256", *remote)
    assert "dave\tSCRAM-SHA-256 (4096)" in _cli("users", "list", *remote).stdout
    _cli("acls", "add", "--allow-principal", "User:dave", "--operation", "Describe", "--topic", "other", *remote)
    listed = _cli("acls", "list", "--topic", "other", *remote).stdout
    assert "(principal=User:dave, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed

    dave = sasl(acl_broker, "dave", "dave-secret")
    assert set(AdminClient(dave).list_topics(timeout=10).topics) == {"other"}
    # Offline, on the storage root of the running broker: effective at once.
    _cli("acls", "add", "--allow-principal", "User:dave", "--operation", "Describe", "--topic", "orders",
         "--data", str(acl_broker.data))
    assert set(AdminClient(dave).list_topics(timeout=10).topics) == {"other", "orders"}
    _cli("acls", "remove", "--principal", "User:dave", "--topic", "orders", "--data", str(acl_broker.data))
    assert set(AdminClient(dave).list_topics(timeout=10).topics) == {"other"}

    refused = _cli("topics", "delete", "other", "--bootstrap", acl_broker.address("SASL_PLAINTEXT"),
                   "--command-config", str(_props(acl_broker, "dave", "dave-secret")), check=False)
    assert refused.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in refused.stderr
    wrong = _cli("topics", "list", "--bootstrap", acl_broker.address("SASL_PLAINTEXT"), "--command-config",
                 str(_props(acl_broker, "dave", "nope")), check=False)
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1 and "refused the login of 'dave'" in wrong.stderr


def _props(acl_broker, user, password):
    path = acl_broker.tmp / f"{user}-{password}.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username={user}\n"
                    f"sasl.password={password}\n")
    return path


def test_quotas_count_the_authenticated_user(acl_broker):
    from kio.schema.alter_client_quotas.v1 import request as aq
    from kio.schema.produce.v9 import request as pr

    from topiclake.client.conn import BrokerConnection
    from topiclake.security.client_config import ClientSecurity
    from topiclake.segments.batch import Record, build_batch

    def client(user):
        return BrokerConnection(acl_broker.address("SASL_PLAINTEXT"), timeout=10,
                              security=ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", user, USERS[user]))

    admin_client = AdminClient(sasl(acl_broker, "admin"))
    grant = acl(ResourceType.TOPIC, "orders", "User:bob", AclOperation.WRITE)
    admin_client.create_acls([grant])[grant].result(10)
    with client("admin") as admin:
        entry = aq.EntryData(entity=(aq.EntityData(entity_type="user", entity_name="bob"),),
                             ops=(aq.OpData(key="producer_byte_rate", value=100.0, remove=False),))
        [result] = admin.request(aq.AlterClientQuotasRequest(entries=(entry,), validate_only=False)).entries
        assert result.error_code.value == 0

    def throttle_ms(user):
        batch = build_batch([Record(0, 0, None, b"y" * 2000, ())], base_offset=0)
        request = pr.ProduceRequest(
            transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
            topic_data=(pr.TopicProduceData(name="orders",
                                            partition_data=(pr.PartitionProduceData(index=0, records=batch),)),))
        with client(user) as c:
            response = c.request(request)
            assert response.responses[0].partition_responses[0].error_code.value == 0
            return response.throttle_time.total_seconds() * 1000

    assert throttle_ms("bob") > 0  # bob's quota, not ANONYMOUS's
    assert throttle_ms("admin") == 0


def test_the_schema_registry_takes_basic_auth_with_the_same_users(acl_broker):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    url = acl_broker.registry_url()
    schema = Schema('{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}', "AVRO")
    bob = SchemaRegistryClient({"url": url, "basic.auth.user.info": f"bob:{USERS['bob']}"})
    assert bob.register_schema("orders-value", schema) >= 1
    for user_info in ("bob:wrong", None):
        conf = {"url": url, **({"basic.auth.user.info": user_info} if user_info else {})}
        with pytest.raises(SchemaRegistryError) as refused:
            SchemaRegistryClient(conf).get_subjects()
        assert refused.value.http_status_code == 401


def test_the_offsets_mirror_authenticates_as_its_client_config(acl_broker):
    from topiclake.lake.runs.mirror import find_bootstrap, mirror_offsets
    from topiclake.security.client_config import ClientSecurity
    from topiclake.segments.storage import StorageLayout

    bootstrap, _source = find_bootstrap(StorageLayout(acl_broker.data), None, protocol="SASL_PLAINTEXT")
    assert bootstrap == acl_broker.address("SASL_PLAINTEXT")  # the registered endpoint for its protocol
    as_admin = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", USERS["admin"])
    assert mirror_offsets(bootstrap, "lake-group", {("orders", 0): 2}, security=as_admin, timeout_s=10).ok
    as_bob = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", USERS["bob"])
    refused = mirror_offsets(bootstrap, "lake-group", {("orders", 0): 3}, security=as_bob, timeout_s=5)
    assert not refused.ok and "AUTHORIZATION_FAILED" in refused.error


def test_required_client_certificates(tmp_path):
    """ssl_client_auth = "required": a client without a certificate signed by ssl_cafile gets no
    TLS session at all; one with it is served as its subject."""
    certs = make_certificates(tmp_path / "certs")
    toml = f"""
[security]
ssl_certfile = "{certs.broker_cert}"
ssl_keyfile = "{certs.broker_key}"
ssl_cafile = "{certs.ca}"
ssl_client_auth = "required"
"""
    proc = SecureBroker(tmp_path, ("SSL",), toml).start()
    try:
        tls = {"bootstrap.servers": proc.address("SSL"), "security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}
        with_cert = {**tls, "ssl.certificate.location": str(certs.client_cert),
                     "ssl.key.location": str(certs.client_key)}
        assert produce_error(with_cert, "certified") is None
        refused = produce_error(tls, "certified")
        assert refused is not None and refused.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT,
                                                          KafkaError._SSL), refused
        log = proc.log_path.read_text()
        assert "TLS handshake failed: the client's certificate was missing or not signed by ssl_cafile" in log
    finally:
        proc.stop()


def test_a_standalone_registry_on_a_sasl_listener_takes_basic_auth(acl_broker, tmp_path):
    """`topiclake registry start` reaches _schemas over SASL (--command-config) and takes HTTP basic
    auth with the storage root's users (--users-from), as the broker's own registry does."""
    import base64
    import re
    import signal
    import urllib.error
    import urllib.request

    properties = tmp_path / "admin.properties"
    properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                          "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                          f'username="admin" password="{USERS["admin"]}";\n')
    log = tmp_path / "registry.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "registry", "start", "--bootstrap",
                                 acl_broker.address("SASL_PLAINTEXT"), "--listen", "127.0.0.1:0", "--command-config",
                                 str(properties), "--users-from", str(acl_broker.data)],
                                stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        deadline, url = time.monotonic() + 60, None
        while url is None and time.monotonic() < deadline:
            found = re.search(r"schema registry at (http://\S+)", log.read_text())
            url = found.group(1) if found else None
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        assert url, log.read_text()

        def post(user: str | None, password: str = ""):
            request = urllib.request.Request(f"{url}/subjects/standalone-value/versions", method="POST",
                                             data=b'{"schema": "\\"string\\""}',
                                             headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
            if user is not None:
                token = base64.b64encode(f"{user}:{password}".encode()).decode()
                request.add_header("Authorization", f"Basic {token}")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return response.status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert post(None) == 401 and post("bob", "wrong") == 401
        assert post("bob", USERS["bob"]) == 200  # stored in _schemas through the SASL listener
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_share_fetch_serves_the_readable_topics_and_refuses_the_others_per_partition(acl_broker):
    """KafkaApis answers TOPIC_AUTHORIZATION_FAILED for each partition of a topic the member may not
    read and serves the rest; it asks on every request, for every partition of the share session."""
    from kio.schema.describe_share_group_offsets.v0 import request as ds
    from kio.schema.metadata.v12 import request as md
    from kio.schema.share_acknowledge.v1 import request as ack_req
    from kio.schema.share_fetch.v1 import request as sf
    from kio.schema.share_group_heartbeat.v1 import request as hb

    from topiclake.client.conn import BrokerConnection
    from topiclake.security.client_config import ClientSecurity

    admin = AdminClient(sasl(acl_broker, "admin"))
    admin.create_topics([_new_topic("share-open"), _new_topic("share-closed")])["share-closed"].result(10)
    grants = [acl(ResourceType.GROUP, "s-pp", "User:bob", AclOperation.READ),
              acl(ResourceType.TOPIC, "share-open", "User:bob", AclOperation.READ)]
    for future in admin.create_acls(grants).values():
        future.result(10)

    def as_user(user):
        return BrokerConnection(acl_broker.address("SASL_PLAINTEXT"), timeout=10,
                              security=ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", user, USERS[user]))

    with as_user("admin") as c:
        ids = {t.name: t.topic_id for t in c.request(md.MetadataRequest(
            topics=tuple(md.MetadataRequestTopic(topic_id=None, name=n) for n in ("share-open", "share-closed")),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)).topics}

    def fetch(bob, epoch, acks=None):
        acks = acks or {}
        response = bob.request(sf.ShareFetchRequest(
            group_id="s-pp", member_id="m" * 22, share_session_epoch=epoch, max_wait=datetime.timedelta(0),
            min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100, forgotten_topics_data=(),
            topics=tuple(sf.FetchTopic(topic_id=ids[name], partitions=(sf.FetchPartition(
                partition_index=0, acknowledgement_batches=tuple(
                    sf.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=(1,))
                    for f, l in acks.get(name, ()))),)) for name in (ids if epoch == 0 else acks))))
        assert response.error_code == ErrorCode.none, response
        return {by_id[t.topic_id]: t.partitions[0] for t in response.responses}

    by_id = {v: k for k, v in ids.items()}
    with as_user("bob") as bob:
        joined = bob.request(hb.ShareGroupHeartbeatRequest(group_id="s-pp", member_id="m" * 22, member_epoch=0,
                                                           rack_id=None, subscribed_topic_names=("share-open",)))
        assert joined.error_code == ErrorCode.none, joined
        opened = fetch(bob, 0)  # opens the session with both topics
        assert {n: p.error_code for n, p in opened.items()} == {
            "share-open": ErrorCode.none, "share-closed": ErrorCode.topic_authorization_failed}
        producer = Producer(sasl(acl_broker, "admin"))
        for topic in ids:
            producer.produce(topic, topic.encode())
        assert producer.flush(10) == 0
        served = fetch(bob, 1)
        assert served["share-open"].error_code == ErrorCode.none and served["share-open"].acquired_records
        assert served["share-closed"].error_code == ErrorCode.topic_authorization_failed
        assert not served["share-closed"].records
        described = bob.request(ds.DescribeShareGroupOffsetsRequest(groups=(ds.DescribeShareGroupOffsetsRequestGroup(
            group_id="s-pp", topics=tuple(ds.DescribeShareGroupOffsetsRequestTopic(topic_name=n, partitions=(0,))
                                          for n in ids)),)))
        assert {t.topic_name: (t.partitions[0].error_code, t.partitions[0].start_offset)
                for t in described.groups[0].topics} == {
            "share-open": (ErrorCode.none, 0), "share-closed": (ErrorCode.topic_authorization_failed, -1)}

        acked = bob.request(ack_req.ShareAcknowledgeRequest(
            group_id="s-pp", member_id="m" * 22, share_session_epoch=2, topics=tuple(ack_req.AcknowledgeTopic(
                topic_id=ids[name], partitions=(ack_req.AcknowledgePartition(partition_index=0, acknowledgement_batches=(
                    ack_req.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=(1,)),)),))
                for name in ids)))
        assert {by_id[t.topic_id]: t.partitions[0].error_code for t in acked.responses} == {
            "share-open": ErrorCode.none, "share-closed": ErrorCode.topic_authorization_failed}

        grant = acl(ResourceType.TOPIC, "share-closed", "User:bob", AclOperation.READ)
        admin.create_acls([grant])[grant].result(10)
        # The same session: the new ACL counts from the next request (which starts the share
        # group at the topic's end, as share.auto.offset.reset=latest says).
        assert "share-closed" not in fetch(bob, 3)
        producer.produce("share-closed", b"after the grant")
        assert producer.flush(10) == 0
        now_open = fetch(bob, 4)["share-closed"]
        assert now_open.error_code == ErrorCode.none and now_open.acquired_records[0].first_offset == 1
