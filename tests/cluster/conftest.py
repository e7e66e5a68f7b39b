"""Real ZooKeeper for the cluster tests: a 1-node and a 3-node ensemble on loopback (started once
per test session, tick 200 ms), a fresh chroot per test, and coordination clients that are
closed after the test. `member` processes can be kill -9'ed to expire a session for real."""

from __future__ import annotations

import uuid

import pytest

from topiclake.broker.cluster.config import ClusterConfig
from topiclake.broker.cluster.ensemble import Ensemble
from topiclake.broker.cluster.zookeeper import ZooKeeperCoordination

from .helpers import SESSION_TIMEOUT_MS, Members


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory) -> Ensemble:
    with Ensemble(tmp_path_factory.mktemp("zookeeper-1"), 1) as ensemble:
        yield ensemble


@pytest.fixture(scope="session")
def _zookeeper3(tmp_path_factory) -> Ensemble:
    with Ensemble(tmp_path_factory.mktemp("zookeeper-3"), 3) as ensemble:
        yield ensemble


@pytest.fixture
def zookeeper3(_zookeeper3) -> Ensemble:
    """The 3-node ensemble; nodes a test killed are restarted after it."""
    yield _zookeeper3
    for node_id, node in _zookeeper3.nodes.items():
        if not node.running():
            _zookeeper3.restart(node_id)
    _zookeeper3.wait_serving()


@pytest.fixture
def chroot() -> str:
    return f"/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def coordination(zookeeper, chroot):
    """`coordination(broker_id, ensemble=zookeeper)`: a started ZooKeeperCoordination."""
    clients = []

    def connect(broker_id: int, ensemble: Ensemble | None = None, **settings) -> ZooKeeperCoordination:
        config = ClusterConfig(zookeeper=(ensemble or zookeeper).connect_string, chroot=chroot,
                               session_timeout_ms=settings.pop("session_timeout_ms", SESSION_TIMEOUT_MS), **settings)
        client = ZooKeeperCoordination(config, broker_id)
        client.start()
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


@pytest.fixture
def members(zookeeper, chroot):
    """Broker stand-ins in their own processes (register, optionally campaign), to kill -9."""
    group = Members(chroot)
    yield group
    group.stop_all()
