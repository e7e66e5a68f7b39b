"""Every ZooKeeper node stopped for a few seconds under load (docs/CLUSTER.md, "Sessions"): the
brokers keep acknowledging, since each acknowledgement is guarded by the partition's fence in
storage, not by ZooKeeper; nothing acknowledged is lost; kazoo's reconnection attempts are one
log line each way; and the cluster still fails over afterwards."""

from __future__ import annotations

import uuid

import pytest

from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.cluster_clients import metadata
from tests.support.waits import wait_for
from .outage import zookeeper_outage
from tests.support.cluster_topics import create_topic, settled

pytestmark = pytest.mark.slow

OUTAGE_S = 6.0  # three sessions of 2 s


def test_brokers_keep_acknowledging_through_a_zookeeper_outage_and_lose_nothing(zookeeper3, tmp_path):
    settings = cluster_settings(zookeeper3.connect_string, f"/outage-{uuid.uuid4().hex[:8]}", session_timeout_ms=2000)
    with ClusterBrokers(tmp_path / "outage", settings) as brokers:
        topic, partitions = "outage", 3
        create_topic(brokers, topic, partitions)
        outage = zookeeper_outage(zookeeper3, brokers, topic, partitions, OUTAGE_S, rate=100)
        assert (outage.lost, outage.offsets_reused, outage.delivery_errors) == (0, 0, 0), outage
        # Acknowledged all along: most of the records produced meanwhile (100/s) were acknowledged.
        assert outage.acked_during >= 0.5 * 100 * OUTAGE_S, outage
        assert outage.longest_gap_s < 2.0, outage
        # A line at the loss and one at the recovery, not one per attempt (about 120 per broker in
        # 6 s). The nodes stop one after another, so a session may first move to a node still
        # running: a brief loss per node stopped at most.
        nodes = len(zookeeper3.nodes)
        for broker_id, lines in outage.kazoo_lines.items():
            assert 2 <= lines <= 2 * nodes and outage.log_lines[broker_id] <= 4 * nodes + 2, (broker_id, outage)
        log = brokers.brokers[1].log_path.read_text(errors="replace")
        assert "without ZooKeeper" in log and "connection messages held back" in log
        # ZooKeeper is back: a killed broker's partitions still move.
        victim = metadata(brokers.bootstrap_of(1), topic).partitions[0].leader
        brokers.kill(victim)
        moved = wait_for(lambda: settled(brokers, topic, partitions), 30, what="a failover after the outage")
        assert moved[0].leader != victim
