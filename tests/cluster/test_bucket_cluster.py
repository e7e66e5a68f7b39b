"""Three broker processes on one bucket root (versitygw) with a real ZooKeeper (issue 29, point 5;
docs/OBJECT-STORAGE.md "Cluster mode on a bucket"): leadership per partition from ZooKeeper, the
bucket's epochs claimed by each leader, metadata written by any broker and seen by all, and
failover by kill -9 and SIGSTOP under an idempotent acks=all producer: every acknowledged record
once at its offset, no offset reused, a paused leader's late write never visible."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest


from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.paths import REPO
from tests.support.cluster_clients import (ConfluentProducer, GroupReader, Ledger, metadata)
from tests.support.cluster_faults import leader_faults_under_load
from tests.support.cluster_topics import create_topic
from tests.support.waits import wait_for

BUCKET_STORAGE = {"flush_ms": 100, "seal_ms": 1500, "delete_grace_ms": 3000}


@pytest.fixture(scope="module")
def bucket_cluster(zookeeper, s3_server, tmp_path_factory):
    env = s3_server.env()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setitem(os.environ, name, value)
        settings = cluster_settings(zookeeper.connect_string, f"/bucket-{uuid.uuid4().hex[:8]}",
                                    extra={"storage": BUCKET_STORAGE, "security": {
                                        "authorizer": "acl", "super_users": ["User:ANONYMOUS"]}})
        root = f"s3://{s3_server.create_bucket()}/data"
        with ClusterBrokers(tmp_path_factory.mktemp("bucket-cluster"), settings, bucket=root,
                            log_level=os.environ.get("BC_LOG", "INFO")) as brokers:
            yield brokers


@pytest.fixture
def cluster_on_bucket(bucket_cluster):
    """The module's cluster, whole again after the test (killed brokers restarted, paused resumed)."""
    yield bucket_cluster
    bucket_cluster.make_whole()



def cached_partitions(brokers: ClusterBrokers, broker_id: int, topic: str) -> set[int]:
    log_dir = brokers.work / f"cache-{broker_id}" / "log"
    return {int(d.name.rpartition("-")[2]) for d in log_dir.iterdir() if d.name.rpartition("-")[0] == topic}


def test_every_broker_sees_the_whole_cluster_and_caches_only_what_it_leads(cluster_on_bucket):
    brokers = cluster_on_bucket
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    views = create_topic(brokers, "shared", 6)
    assert {v.leader for v in views.values()} == {1, 2, 3}, "the partitions spread over the brokers"
    for broker_id in (1, 2, 3):  # Metadata from any broker: every broker, every leader, alike
        view = metadata(brokers.bootstrap_of(broker_id), "shared")
        assert view.brokers == {1, 2, 3} and view.partitions == views
        admin = AdminClient({"bootstrap.servers": brokers.bootstrap_of(broker_id)})
        assert "shared" in admin.list_topics(timeout=10).topics
    led = {b: {p for p, v in views.items() if v.leader == b} for b in (1, 2, 3)}
    wait_for(lambda: all(cached_partitions(brokers, b, "shared") == led[b] for b in (1, 2, 3)), 20,
             what="each cache holding only its partitions")

    # A topic config changed through one broker is described alike by another (the bucket's copy).
    other = next(b for b in (1, 2, 3) if b != views[0].leader)
    alter = AdminClient({"bootstrap.servers": brokers.bootstrap_of(other)})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "shared", incremental_configs=[
        ConfigEntry("retention.ms", "123456789", incremental_operation=AlterConfigOpType.SET)])
    for future in alter.incremental_alter_configs([resource]).values():
        future.result(30)
    reader = AdminClient({"bootstrap.servers": brokers.bootstrap_of(views[0].leader)})

    def described() -> str | None:
        [future] = reader.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "shared")]).values()
        return future.result(30)["retention.ms"].value

    wait_for(lambda: described() == "123456789", 10, what="the config change on another broker")


def test_acls_created_through_three_brokers_at_once_all_land(cluster_on_bucket):
    """One shared object (the ACLs) changed by every broker at the same moment: each lost race is
    made again on the winner's copy, so no broker's change is lost."""
    brokers = cluster_on_bucket
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    def create(broker_id: int) -> None:
        admin = AdminClient({"bootstrap.servers": brokers.bootstrap_of(broker_id)})
        for n in range(6):  # one request each: many chances to race the other brokers
            acl = AclBinding(ResourceType.TOPIC, f"acl-{broker_id}-{n}", ResourcePatternType.LITERAL,
                             f"User:user-{broker_id}", "*", AclOperation.READ, AclPermissionType.ALLOW)
            admin.create_acls([acl])[acl].result(30)

    threads = [threading.Thread(target=create, args=(b,)) for b in (1, 2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    wanted = {f"acl-{b}-{n}" for b in (1, 2, 3) for n in range(6)}
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)

    def names(broker_id: int) -> set[str]:
        admin = AdminClient({"bootstrap.servers": brokers.bootstrap_of(broker_id)})
        return {acl.name for acl in admin.describe_acls(everything).result(30)}

    for broker_id in (1, 2, 3):
        wait_for(lambda: wanted <= names(broker_id), 10, what=f"broker {broker_id} describing every ACL",
                 detail=lambda: sorted(wanted - names(broker_id)))


def test_kill_9_and_sigstop_of_leaders_lose_nothing_acknowledged_and_late_writes_stay_invisible(cluster_on_bucket):
    brokers = cluster_on_bucket
    topic, partitions = "failover", 6
    create_topic(brokers, topic, partitions)
    ledger, stop_producer, stop_reader = Ledger(), threading.Event(), threading.Event()
    # A bucket leader answers a produce after its flush tick, so requests are always in flight when
    # it is paused: librdkafka waits for them socket.timeout.ms (60 s by default) before it sends
    # the partition's records to the new leader.
    producer = ConfluentProducer(brokers.bootstrap, topic, partitions, ledger, stop_producer,
                                 **{"socket.timeout.ms": 6000})
    reader = GroupReader(brokers.bootstrap, topic, "failover-readers", ledger, stop_reader)
    run = leader_faults_under_load(brokers, topic, partitions, ledger, [producer], stop_producer, reader, stop_reader,
                                   first_acks_s=60, acked_again_s=30)
    assert run.failover_s < 15, f"partition 1 acknowledged again only {run.failover_s:.1f} s after the kill"
    assert len(run.expected) > 500


def test_a_single_broker_refuses_the_clusters_bucket_naming_it(cluster_on_bucket, tmp_path):
    brokers = cluster_on_bucket
    root, cluster = brokers.brokers[1].root, brokers.settings["cluster"]
    alone = subprocess.run([sys.executable, "-m", "topiclake.cli", "broker", "start", "--port", "0", "--data", root,
                            "--cache-dir", str(tmp_path / "alone-cache"), "--config", str(REPO / "conf" / "topiclake.toml")],
                           cwd=REPO, capture_output=True, text=True, timeout=90)
    assert alone.returncode == 1
    assert alone.stderr.strip().splitlines() == [
        f"error: storage root {root} is used by a cluster of brokers ({cluster['zookeeper']}{cluster['chroot']}): "
        "set [cluster] zookeeper to join it, or use another --data"], alone.stderr


def test_delete_topics_leaves_none_of_the_topics_objects(cluster_on_bucket):
    """DeleteTopics through one broker while the partitions' leaders (all three brokers) have
    flushed, sealed and still hold tails: once they resigned, nothing of the topic is in the bucket
    (a leader's late flush, seal or manifest would otherwise linger under log/<topic>-<p>/)."""
    brokers = cluster_on_bucket
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from topiclake.objectlog.keys import PartitionKeys
    from topiclake.objectlog.notices import notice_key, post_notice
    from topiclake.store.objects import ObjectStore
    from topiclake.store.root import parse_root

    topic = "doomed"
    views = create_topic(brokers, topic, 6)
    assert {v.leader for v in views.values()} == {1, 2, 3}
    producer = Producer({"bootstrap.servers": brokers.bootstrap, "acks": "all", "linger.ms": 5})

    def produce(tag: str) -> None:
        for n in range(600):
            producer.produce(topic, f"{tag}{n}".encode(), partition=n % 6)
        assert producer.flush(60) == 0

    produce("sealed-")
    store = ObjectStore(parse_root(brokers.brokers[1].root))

    def objects() -> list[str]:
        return [info.key for info in store.list("log") if info.key.split("/")[1].rpartition("-")[0] == topic]

    wait_for(lambda: any(k.endswith(".log") and ".e" not in k.rpartition("/")[2] for k in objects()), 30,
             what="a sealed segment of the topic")  # seal_ms 1.5 s: closed segments and manifests too
    produce("tail-")  # flushed, and due to be sealed 1.5 s later: around the deletion
    del producer
    notice = notice_key(PartitionKeys(topic, 0))
    post_notice(store, PartitionKeys(topic, 0), 0)  # as a maintenance job's commit leaves it
    admin = AdminClient({"bootstrap.servers": brokers.bootstrap_of(1)})
    admin.delete_topics([topic])[topic].result(30)
    wait_for(lambda: store.head(f"topics/{topic}.json") is None, 20, what="the topic's object deleted")
    wait_for(lambda: not objects(), 30, what="the topic's partition objects deleted", detail=objects)
    assert store.head(notice) is None  # its maintenance notice too
    time.sleep(3)  # a tick, a seal and a manifest poll later: nothing came back
    assert not objects(), objects()
