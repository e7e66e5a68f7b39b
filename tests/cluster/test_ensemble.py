"""Three ZooKeeper nodes: killing one, the leader included, does not stop compare-and-set writes,
registrations survive it, and the node comes back. Plus bin/zookeeper as an operator uses it."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from topiclake.broker.cluster.coordination import BrokerInfo, CoordinationError, PartitionState
from topiclake.broker.cluster.ensemble import Ensemble, EnsembleError, node_mode

from tests.support.paths import REPO
from tests.support.waits import wait_for


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


def _zookeeper(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "bin" / "zookeeper"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _status(cwd, directory: str) -> dict[int, str]:
    """node id -> what `bin/zookeeper status` says of it (after the colon)."""
    done = _zookeeper(cwd, "status", directory)
    assert done.returncode == 0, done.stderr
    return {int(line.split()[1]): line.rsplit(": ", 1)[1] for line in done.stdout.splitlines()}


def test_bin_zookeeper_for_an_operator_one_node_at_a_time_on_its_ports(tmp_path):
    """A relative DIR is the caller's; stop/start/restart of one node or all keep the ports and
    the data; status tells serving nodes from stopped and dead ones."""
    from kazoo.client import KazooClient

    started = _zookeeper(tmp_path, "start", "--nodes", "3", "zk")  # relative to the caller's cwd
    assert started.returncode == 0, started.stderr
    connect = started.stdout.strip()
    assert connect.count(",") == 2 and connect.startswith("127.0.0.1:")
    assert (tmp_path / "zk" / "ensemble.json").exists() and not (REPO / "zk").exists()
    ensemble = Ensemble.attach(tmp_path / "zk")
    try:
        assert sorted(_status(tmp_path, "zk").values()) == ["follower", "follower", "leader"]
        client = KazooClient(hosts=connect)
        client.start(timeout=30)
        client.create("/kept", b"data")
        client.stop()

        stopped = _zookeeper(tmp_path, "stop", "zk", "--node", "2")
        assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped 1 ZooKeeper node(s) of zk")
        assert _status(tmp_path, "zk")[2] == "stopped"
        again = _zookeeper(tmp_path, "start", "zk", "--node", "2")
        assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == connect  # the same ports
        assert _status(tmp_path, "zk")[2] in ("leader", "follower")
        assert node_mode("127.0.0.1", ensemble.nodes[2].client_port) in ("leader", "follower")

        os.kill(Ensemble.attach(tmp_path / "zk").nodes[3].pid, signal.SIGKILL)  # the process dies under it
        wait_for(lambda: _status(tmp_path, "zk")[3] == "dead (the process is gone)", 20, what="node 3 shown dead")
        restarted = _zookeeper(tmp_path, "restart", "zk", "--node", "3")
        assert restarted.returncode == 0, restarted.stderr
        assert _status(tmp_path, "zk")[3] in ("leader", "follower")

        whole = _zookeeper(tmp_path, "stop", "zk")
        assert whole.stdout.strip() == "stopped 3 ZooKeeper node(s) of zk"
        assert set(_status(tmp_path, "zk").values()) == {"stopped"}
        twice = _zookeeper(tmp_path, "stop", "zk")
        assert (twice.returncode, twice.stdout.strip()) == (0, "no ZooKeeper node of zk was running")
        resumed = _zookeeper(tmp_path, "start", "zk")
        assert resumed.returncode == 0 and resumed.stdout.strip().splitlines()[-1] == connect
        client = KazooClient(hosts=connect)
        client.start(timeout=30)
        assert client.get("/kept")[0] == b"data"  # the same data
        client.stop()
    finally:
        Ensemble.attach(tmp_path / "zk").stop()
    with pytest.raises(EnsembleError, match="no ZooKeeper ensemble recorded"):
        Ensemble.attach(tmp_path / "zk")  # the Python API's stop forgets it
    missing = _zookeeper(tmp_path, "stop", "zk")
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        "error: no ZooKeeper ensemble recorded in zk"]
