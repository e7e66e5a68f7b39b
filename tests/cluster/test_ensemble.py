"""Three ZooKeeper nodes: killing one, the leader included, does not stop compare-and-set writes,
registrations survive it, and the node comes back. Plus bin/zookeeper from the command line."""

from __future__ import annotations

import subprocess
import time

import pytest

from topiclake.broker.cluster.coordination import BrokerInfo, CoordinationError, PartitionState
from topiclake.broker.cluster.ensemble import Ensemble, EnsembleError, node_mode

from .helpers import REPO


def _write_until_ok(client, version: int, epoch: int, timeout: float = 15.0) -> tuple[int, float]:
    """Compare-and-set the next epoch, retrying connection trouble; (new version, seconds taken)."""
    started = time.monotonic()
    while True:
        try:
            new = client.set_partition_state("t", 0, PartitionState(1, epoch, (1, 2)), version)
            return new.version, time.monotonic() - started
        except CoordinationError:
            current = client.partition_state("t", 0) if client.session_state.value == "connected" else None
            if current is not None and current.value.leader_epoch == epoch:
                return current.version, time.monotonic() - started  # it did apply before the error
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.02)


@pytest.mark.parametrize("victim", ["leader", "follower"])
def test_killing_one_of_three_zookeeper_nodes_does_not_stop_writes(zookeeper3, coordination, victim):
    client = coordination(1, zookeeper3)
    client.register_broker(BrokerInfo(1, "127.0.0.1", 9001))
    client.create_topic("t", {0: PartitionState(1, 0, (1, 2))})
    version = client.partition_state("t", 0).version
    leader = zookeeper3.leader_id()
    target = leader if victim == "leader" else next(n for n in zookeeper3.nodes if n != leader)
    zookeeper3.kill(target)
    pauses = []
    for epoch in range(1, 21):
        version, took = _write_until_ok(client, version, epoch)
        pauses.append(took)
    assert client.partition_state("t", 0).value.leader_epoch == 20
    assert max(pauses) < 10  # a new ZooKeeper leader within seconds (measured in bench/coordination.py)
    assert 1 in client.live_brokers()  # the session survived the node's death
    zookeeper3.restart(target)
    assert node_mode(zookeeper3.host, zookeeper3.nodes[target].client_port) in ("leader", "follower")


def test_bin_zookeeper_starts_reports_and_stops_an_ensemble(tmp_path):
    script = REPO / "bin" / "zookeeper"
    started = subprocess.run([str(script), "start", "--nodes", "3", str(tmp_path)], capture_output=True, text=True,
                             timeout=300)
    assert started.returncode == 0, started.stderr
    connect = started.stdout.strip()
    assert connect.count(",") == 2 and connect.startswith("127.0.0.1:")
    try:
        status = subprocess.run([str(script), "status", str(tmp_path)], capture_output=True, text=True, timeout=120)
        modes = sorted(line.rsplit(": ", 1)[1] for line in status.stdout.splitlines())
        assert modes == ["follower", "follower", "leader"], status.stdout
    finally:
        stopped = subprocess.run([str(script), "stop", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0 and "stopped 3 ZooKeeper node(s)" in stopped.stdout
    with pytest.raises(EnsembleError, match="no ZooKeeper ensemble recorded"):
        Ensemble.attach(tmp_path)  # its record went with it
    again = subprocess.run([str(script), "stop", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and again.stderr.strip().splitlines() == [
        f"error: no ZooKeeper ensemble recorded in {tmp_path}"]
