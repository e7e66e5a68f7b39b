"""The coordination interface against a real ZooKeeper (one node): registrations that vanish when
a broker is kill -9'ed, controller election that moves when the controller dies, partition
state changed only by compare-and-set, change notifications, session callbacks, chroots."""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient

from topiclake.broker.cluster.coordination import (BrokerIdInUseError, BrokerInfo, CoordinationError,
                                                   NodeExistsError, NotControllerError, PartitionState, SessionState,
                                                   StaleVersionError)

from tests.cluster.helpers import SESSION_TIMEOUT_MS, Recorder
from tests.support.waits import wait_for


def test_a_registration_is_seen_by_every_broker_and_goes_when_its_broker_is_killed(coordination, members, zookeeper):
    observer = coordination(100)
    changes = Recorder()
    observer.watch_brokers(changes)
    assert changes.next() == {}
    first = members.start(zookeeper.connect_string, 1)
    members.start(zookeeper.connect_string, 2)
    live = changes.until(lambda brokers: set(brokers) == {1, 2})
    assert live[1] == BrokerInfo(1, "127.0.0.1", 9001, ("PLAINTEXT://127.0.0.1:9001",))
    killed_at = first.kill()
    assert set(changes.until(lambda brokers: 1 not in brokers, timeout=10)) == {2}
    gone_after = time.monotonic() - killed_at
    assert SESSION_TIMEOUT_MS / 1000 * 0.5 < gone_after < SESSION_TIMEOUT_MS / 1000 * 3  # expiry, not a close
    assert set(observer.live_brokers()) == {2}


def test_a_broker_id_held_by_a_live_session_is_refused(coordination):
    coordination(1).register_broker(BrokerInfo(1, "127.0.0.1", 9001))
    twin = coordination(1)
    started = time.monotonic()
    with pytest.raises(BrokerIdInUseError, match="broker id 1 is registered by another live session"):
        twin.register_broker(BrokerInfo(1, "127.0.0.1", 9002))
    assert time.monotonic() - started >= 2 * SESSION_TIMEOUT_MS / 1000  # it waited for a stale session to expire


def test_a_restarted_broker_takes_its_id_back_once_the_old_session_expires(coordination, members, zookeeper):
    members.start(zookeeper.connect_string, 5).kill()
    again = coordination(5)
    again.register_broker(BrokerInfo(5, "127.0.0.1", 9555))  # waits for the dead session's node to go
    assert again.live_brokers()[5].port == 9555


def test_the_controller_seat_moves_when_the_controller_is_killed(coordination, members, zookeeper):
    observer = coordination(100)
    seats = Recorder()
    observer.watch_controller(seats)
    assert seats.next() is None
    first = members.start(zookeeper.connect_string, 1, campaign=True)
    assert first.wait_event("elected")["elected"] == 1
    second = members.start(zookeeper.connect_string, 2, campaign=True)
    assert seats.until(lambda seat: seat is not None) == (1, 1)
    killed_at = first.kill()
    assert second.wait_event("elected", timeout=10)["elected"] == 2
    assert time.monotonic() - killed_at < 3 * SESSION_TIMEOUT_MS / 1000
    assert seats.until(lambda seat: seat is not None and seat[0] == 2) == (2, 2)
    assert observer.controller() == (2, 2)


def test_one_controller_at_a_time_and_a_closed_one_resigns(coordination):
    elected, resigned = Recorder(), Recorder()
    brokers = [coordination(n) for n in (1, 2, 3)]
    for broker in brokers:
        broker.campaign(lambda token, b=broker.broker_id: elected((b, token)), lambda b=broker.broker_id: resigned(b))
    winner, token = elected.next()
    assert token.epoch == 1 and token.broker_id == winner
    with pytest.raises(Exception):
        elected.next(timeout=1)  # nobody else wins while the seat is taken
    brokers[winner - 1].close()
    assert resigned.next() == winner
    successor, token = elected.next(timeout=10)
    assert successor != winner and token.epoch == 2


def _state(leader: int, epoch: int) -> PartitionState:
    return PartitionState(leader, epoch, (1, 2, 3))


def test_partition_state_changes_only_by_compare_and_set(coordination):
    broker = coordination(1)
    broker.create_topic("orders", {0: _state(1, 0), 1: _state(2, 0)})
    with pytest.raises(NodeExistsError, match="topic orders exists"):
        broker.create_topic("orders", {0: _state(1, 0)})
    current = broker.partition_state("orders", 0)
    assert current.value == _state(1, 0) and current.version == 0
    moved = broker.set_partition_state("orders", 0, _state(2, 1), expected_version=0)
    assert moved.version == 1 and broker.partition_state("orders", 0) == moved
    with pytest.raises(StaleVersionError):  # a second writer that read version 0
        broker.set_partition_state("orders", 0, _state(3, 1), expected_version=0)
    assert broker.partition_state("orders", 0).value.leader == 2
    assert set(broker.partition_states("orders")) == {0, 1} and broker.topics() == ["orders"]
    assert broker.partition_state("orders", 7) is None


def test_a_deposed_controllers_write_is_refused_even_with_a_fresh_version(coordination):
    old, new = coordination(1), coordination(2)
    elected = Recorder()
    old.campaign(elected, lambda: None)
    old_token = elected.next()
    old.create_topic("t", {0: _state(1, 0)}, token=old_token)
    old.close()  # the seat frees; broker 2 raises the controller epoch
    new.campaign(elected, lambda: None)
    new_token = elected.next(timeout=10)
    assert new_token.epoch == old_token.epoch + 1
    version = new.partition_state("t", 0).version
    with pytest.raises(NotControllerError, match=f"controller epoch {old_token.epoch} .* no longer current"):
        new.set_partition_state("t", 0, _state(1, 5), version, token=old_token)  # a zombie's token
    assert new.set_partition_state("t", 0, _state(2, 1), version, token=new_token).value.leader == 2


def test_the_ephemeral_version_trap_and_why_partition_state_is_persistent(coordination, zookeeper, chroot):
    """Measured here: an ephemeral znode deleted and created again starts at version 0, so a stale
    leader's compare-and-set on the version it remembered succeeds. The persistent state's version
    only rises, so the same stale write is refused."""
    raw = KazooClient(hosts=zookeeper.connect_string)
    raw.start()
    try:
        raw.create(f"{chroot}/leader", b"broker-1", ephemeral=True, makepath=True)
        stale_version = raw.get(f"{chroot}/leader")[1].version  # broker 1 remembers 0
        raw.delete(f"{chroot}/leader")  # broker 1's session expires...
        raw.create(f"{chroot}/leader", b"broker-2", ephemeral=True)  # ...broker 2 takes over
        raw.set(f"{chroot}/leader", b"broker-1 again", version=stale_version)  # the trap: accepted
        assert raw.get(f"{chroot}/leader")[0] == b"broker-1 again"
    finally:
        raw.stop()
        raw.close()
    broker = coordination(1)
    broker.create_topic("t", {0: _state(1, 0)})
    stale = broker.partition_state("t", 0).version
    broker.set_partition_state("t", 0, _state(2, 1), stale)  # broker 2 takes over by CAS
    with pytest.raises(StaleVersionError):
        broker.set_partition_state("t", 0, _state(1, 0), stale)
    assert broker.partition_state("t", 0).value == _state(2, 1)


def test_watchers_see_every_state_change_in_order(coordination):
    writer, reader = coordination(1), coordination(2)
    writer.create_topic("t", {0: _state(1, 0)})
    seen = Recorder()
    reader.watch_partition_state("t", 0, seen)
    assert seen.next().value.leader_epoch == 0
    version = 0
    for epoch in range(1, 4):
        version = writer.set_partition_state("t", 0, _state(epoch % 3 + 1, epoch), version).version
        assert seen.until(lambda v: v.value.leader_epoch >= epoch).value.leader_epoch == epoch


def test_change_notifications_reach_every_broker_in_order(coordination):
    publisher, first, second = coordination(1), coordination(2), coordination(3)
    old = publisher.publish_change("configs", {"entity": "topics/before"})
    got_first, got_second, acls = Recorder(), Recorder(), Recorder()
    assert first.watch_changes("configs", got_first) == old  # from now on
    second.watch_changes("configs", got_second, after=-1)  # from the start of the log
    first.watch_changes("acls", acls)
    sequences = [publisher.publish_change("configs", {"entity": f"topics/t{n}"}) for n in range(5)]
    assert [got_first.next().sequence for _ in range(5)] == sequences
    assert [got_second.next().payload["entity"] for _ in range(6)] == ["topics/before"] + [
        f"topics/t{n}" for n in range(5)]
    publisher.publish_change("acls", {"resource": "topic:x"})
    assert acls.next().payload == {"resource": "topic:x"}
    with pytest.raises(Exception):
        got_first.next(timeout=0.5)  # each change once


def test_topic_creation_reaches_every_broker(coordination):
    creator, other = coordination(1), coordination(2)
    seen = Recorder()
    other.watch_topics(seen)
    assert seen.next() == []
    creator.create_topic("a", {0: _state(1, 0)})
    assert seen.until(lambda topics: topics == ["a"]) == ["a"]


def test_a_zookeeper_outage_suspends_the_session_and_its_return_resumes_it(tmp_path, chroot):
    """A broker must stop leading the moment its session is in doubt (SUSPENDED): calls fail fast
    instead of hanging; when ZooKeeper is back within the session, the same session resumes."""
    from topiclake.broker.cluster.config import ClusterConfig
    from topiclake.broker.cluster.ensemble import Ensemble
    from topiclake.broker.cluster.zookeeper import ZooKeeperCoordination

    # A slower tick lets the session outlive a ZooKeeper restart on a busy machine (the server
    # caps a session at 20 ticks: 4 s at the fixtures' 200 ms tick, 20 s here).
    with Ensemble(tmp_path / "zk", 1, tick_ms=1000) as ensemble:
        client = ZooKeeperCoordination(ClusterConfig(zookeeper=ensemble.connect_string, chroot=chroot,
                                                     session_timeout_ms=15000), 1)
        client.start()
        try:
            states = Recorder()
            client.add_session_listener(states)
            client.register_broker(BrokerInfo(1, "127.0.0.1", 9001))
            ensemble.kill(1)
            assert states.next(timeout=5) is SessionState.SUSPENDED
            assert client.session_state is SessionState.SUSPENDED
            started = time.monotonic()
            with pytest.raises(CoordinationError, match="the session is suspended"):
                client.live_brokers()
            assert time.monotonic() - started < 0.5
            ensemble.restart(1)
            # kazoo may be mid-handshake with the starting server (its attempt times out after the
            # session timeout), so allow two of them before the session must be back.
            assert states.next(timeout=35) is SessionState.CONNECTED
            assert 1 in client.live_brokers()
        finally:
            client.close()


def test_a_paused_broker_loses_its_session_and_registers_again_when_it_resumes(coordination, members, zookeeper):
    """SIGSTOP beyond the session timeout: everybody sees the broker go; on SIGCONT it hears LOST
    (every ephemeral node of its is gone), gets a new session, and is registered again."""
    import os
    import signal

    observer = coordination(100)
    brokers = Recorder()
    observer.watch_brokers(brokers)
    paused = members.start(zookeeper.connect_string, 4)
    brokers.until(lambda live: 4 in live)
    os.kill(paused.process.pid, signal.SIGSTOP)
    try:
        brokers.until(lambda live: 4 not in live, timeout=10)
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)
    sessions = [paused.wait_event("session")["session"]]
    while sessions[-1] != "connected":
        sessions.append(paused.wait_event("session")["session"])
    assert "lost" in sessions and sessions[-1] == "connected"
    brokers.until(lambda live: 4 in live, timeout=10)


def test_chroots_keep_clusters_apart(coordination, zookeeper):
    from topiclake.broker.cluster.config import ClusterConfig
    from topiclake.broker.cluster.zookeeper import ZooKeeperCoordination

    mine = coordination(1)
    mine.register_broker(BrokerInfo(1, "127.0.0.1", 9001))
    other = ZooKeeperCoordination(ClusterConfig(zookeeper=zookeeper.connect_string + "/other-cluster"), 1)
    other.start()
    try:
        assert other.live_brokers() == {} and 1 in mine.live_brokers()
        other.register_broker(BrokerInfo(1, "127.0.0.1", 9999))  # the same id, another cluster
        assert mine.live_brokers()[1].port == 9001
    finally:
        other.close()


def test_an_unreachable_zookeeper_is_one_clear_error():
    from topiclake.broker.cluster.config import ClusterConfig
    from topiclake.broker.cluster.ensemble import _free_ports
    from topiclake.broker.cluster.zookeeper import ZooKeeperCoordination

    port = _free_ports(1, "127.0.0.1")[0]
    client = ZooKeeperCoordination(ClusterConfig(zookeeper=f"127.0.0.1:{port}", connection_timeout_ms=500), 1)
    with pytest.raises(CoordinationError, match=f"cannot reach ZooKeeper at 127.0.0.1:{port} within 500 ms"):
        client.start()
