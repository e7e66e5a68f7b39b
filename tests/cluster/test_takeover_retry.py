"""The cluster node's retry of a failed leadership change (lib/broker/cluster_node.py `_chain`,
CONVERGE_RETRY_S): two brokers on a bucket root reached through a fault-injecting proxy
(tests/support/store_faults.py), the leader of a partition killed -9, and the survivor's takeover
of it failing at the store (its epoch claim refused with 503 past the client's retries). Nothing
else brings the partition back (its state in ZooKeeper does not change), so the node looks at it
again every CONVERGE_RETRY_S; once the store takes the claim, it takes over and serves the
partition, and every acknowledged record is read back once at its offset.

A resignation is the other half of a leadership change, and it sends nothing to the store or
ZooKeeper (the new leader's claim fences the old one): with every store request refused, the old
leader of a reassigned partition lets it go at once, with no failure to retry. And a partition
let go after a fenced append is looked at again: led again if its state still names the broker."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable
import re
import signal
import time
import uuid
from collections import Counter
from datetime import datetime

from tests.support.bucket_broker import AckedProducer, consume_all
from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.cluster_topics import create_topic, settled
from tests.support.store_faults import HOLD
from tests.support.waits import wait_for
from topiclake.broker.cluster_node import CONVERGE_RETRY_S

TOPIC = "takeover-retry"
EPOCH_CLAIM = rf"/log/{TOPIC}-0/leader-epochs/\d+\.claim$"
STORAGE = {"flush_ms": 100, "seal_ms": 1500, "delete_grace_ms": 3000}
FAILED = f"changing the leadership of {TOPIC}-0 failed; retried in {CONVERGE_RETRY_S:.0f} s"
TRY_S = 0.5  # a try of the takeover takes at least this long before it fails (the client's own retries)


def _stamps(log_text: str, says: str) -> list[datetime]:
    """When each line of the broker's log saying `says` was written."""
    return [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in log_text.splitlines() if says in line]


def _failures(path) -> list[datetime]:
    return _stamps(path.read_text(errors="replace"), FAILED)


def _timed_retry_failed(path) -> bool:
    """Whether two failures of the takeover came at least the retry's delay apart (plus a try's own time)."""
    failures = _failures(path)
    return any((later - earlier).total_seconds() >= CONVERGE_RETRY_S + TRY_S
               for earlier, later in zip(failures, failures[1:]))


def test_a_takeover_that_fails_at_the_store_is_retried_and_the_partition_serves_again(zookeeper, store_proxy,
                                                                                      tmp_path):
    proxy, root, _direct = store_proxy
    settings = cluster_settings(zookeeper.connect_string, f"/retry-{uuid.uuid4().hex[:8]}", internal_partitions=1,
                                extra={"storage": STORAGE})
    with ClusterBrokers(tmp_path, settings, count=2, bucket=str(root),
                        log_level=os.environ.get("BC_LOG", "INFO")) as brokers:
        leader = create_topic(brokers, TOPIC, 1)[0].leader
        survivor = next(b for b in (1, 2) if b != leader)
        producer = AckedProducer(brokers.bootstrap, TOPIC, "v", **{"request.timeout.ms": 5000}).start()
        producer.wait_acked(100)

        rule = proxy.fail("PUT", EPOCH_CLAIM, times=None)  # 503 (not applied), past the client's own retries
        brokers.kill(leader)
        survivor_log = brokers.brokers[survivor].log_path
        # The leader's death brings several events (a new controller, its reads), each a try of its
        # own, back to back. The store keeps
        # refusing until a try came CONVERGE_RETRY_S after the one before (the node's timed retry,
        # nothing else left to try): then the next timed retry is the one that can succeed.
        wait_for(lambda: _timed_retry_failed(survivor_log), 40, 0.05, what="a timed retry of the takeover failing",
                 detail=brokers.logs)
        proxy.clear(rule)
        stalled = len(producer.acked)

        producer.wait_acked(stalled + 200, timeout=30)
        view = wait_for(lambda: settled(brokers, TOPIC, 1), 10, what="the survivor named leader")
        assert view[0].leader == survivor
        told = survivor_log.read_text(errors="replace")
        took = _stamps(told, f"took over log/{TOPIC}-0 at epoch")
        assert took, told[-3000:]
        before = [at for at in _stamps(told, FAILED) if at < took[0]]
        assert before, "the takeover did not fail first"
        assert (took[0] - before[-1]).total_seconds() >= CONVERGE_RETRY_S, \
            f"taken over {took[0] - before[-1]} after the last failure, not by the retry due {CONVERGE_RETRY_S} s later"
        producer.stop(flush_s=60)
        assert not producer.failed, producer.failed[:3]

        _read_back_once(brokers.bootstrap_of(survivor), TOPIC, producer)


def _read_back_once(bootstrap: str, topic: str, producer: AckedProducer) -> None:
    """Every acknowledged record read back once, at its offset."""
    records = consume_all(bootstrap, topic, len(producer.acked))
    values = Counter(value for value, _p, _o in records)
    assert not [v for v, n in values.items() if n > 1], "a record read twice"
    assert {(v, o) for v, _p, o in producer.acked} <= {(v, o) for v, _p, o in records}, \
        "an acknowledged record lost or at another offset"
    assert len({o for _v, _p, o in records}) == len(records), "an offset used twice"


@contextlib.contextmanager
def _producing(zookeeper, root, tmp_path, topic: str):
    """Two cluster brokers on the proxied bucket, `topic` of one partition created, and a producer
    with 100 records acknowledged: (brokers, the partition's first view, the producer)."""
    settings = cluster_settings(zookeeper.connect_string, f"/{topic}-{uuid.uuid4().hex[:8]}", internal_partitions=1,
                                extra={"storage": STORAGE})
    with ClusterBrokers(tmp_path, settings, count=2, bucket=str(root),
                        log_level=os.environ.get("BC_LOG", "INFO")) as brokers:
        before = create_topic(brokers, topic, 1)[0]
        producer = AckedProducer(brokers.bootstrap, topic, "v", **{"request.timeout.ms": 5000}).start()
        producer.wait_acked(100)
        yield brokers, before, producer


def test_a_resignation_needs_nothing_of_the_store(zookeeper, store_proxy, tmp_path):
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    proxy, root, _direct = store_proxy
    topic = "resigned-offline"
    with _producing(zookeeper, root, tmp_path, topic) as (brokers, before, producer):
        leader = before.leader
        other = next(b for b in (1, 2) if b != leader)

        refusals = [proxy.fail(method, "", action=403, times=None) for method in ("GET", "HEAD", "PUT", "DELETE")]
        admin = KafkaAdminClient(bootstrap_servers=brokers.bootstrap)
        try:
            assert admin.alter_partition_reassignments({TopicPartition(topic, 0): [other]}) == \
                {TopicPartition(topic, 0): None}
        finally:
            admin.close()
        leader_log = brokers.brokers[leader].log_path
        wait_for(lambda: f"let go of 1 ({topic}-0)" in leader_log.read_text(errors="replace"), 20, 0.1,
                 what="the old leader letting the partition go", detail=brokers.logs)
        assert sum(rule.hits for rule in refusals) > 0, "the store was never asked: nothing was refused"
        assert f"changing the leadership of {topic}-0 failed" not in leader_log.read_text(errors="replace")
        for rule in refusals:
            proxy.clear(rule)

        view = wait_for(lambda: (v := settled(brokers, topic, 1)) and v[0].leader == other and v, 30,
                        what="the new leader serving", detail=brokers.logs)
        assert view[0].leader == other
        producer.wait_acked(len(producer.acked) + 200, timeout=60)
        producer.stop(flush_s=60)
        assert not producer.failed, producer.failed[:3]
        _read_back_once(brokers.bootstrap_of(other), topic, producer)


def test_a_partition_fenced_by_a_claim_no_state_names_is_led_again(zookeeper, store_proxy, tmp_path):
    """A claim of the next epoch that no ZooKeeper state names (claims are only ever made for a
    state, so this one stands for any fence the state does not explain): the leader's next flush
    meets it and lets the partition go, while its state still names that broker. The node looks at
    the partition again: it takes it over above the claim (the state's epoch raised by
    compare-and-set) and acknowledges again. Before, nothing looked at it again: it stayed named to
    a broker that no longer served it, every produce to it answered NOT_LEADER_OR_FOLLOWER."""
    from topiclake.objectlog.fence import BucketFence
    from topiclake.objectlog.keys import PartitionKeys

    _proxy, root, direct = store_proxy
    topic = "stray-claim"
    with _producing(zookeeper, root, tmp_path, topic) as (brokers, before, producer):

        BucketFence(direct, PartitionKeys(topic, 0)).claim(before.epoch + 1, broker_id=0)
        leader_log = brokers.brokers[before.leader].log_path
        wait_for(lambda: f"no longer leading log/{topic}-0" in leader_log.read_text(errors="replace"), 20, 0.1,
                 what="the leader meeting the claim", detail=brokers.logs)
        fenced_at = len(producer.acked)
        producer.wait_acked(fenced_at + 200, timeout=30)
        view = wait_for(lambda: settled(brokers, topic, 1), 10, what="the partition led")
        assert view[0].leader == before.leader and view[0].epoch > before.epoch + 1, (before, view)
        producer.stop(flush_s=60)
        assert not producer.failed, producer.failed[:3]
        _read_back_once(brokers.bootstrap_of(before.leader), topic, producer)


def _stopped_mid_takeover(zookeeper, store_proxy, tmp_path, topic: str, *, claimed_first: bool = False,
                          while_held: Callable[[Path, list[str]], None] | None = None) -> tuple[str, int]:
    """The leader of `topic`-0 killed, the survivor's takeover held at its epoch claim (with
    `claimed_first`, that epoch then claimed by another), SIGTERM to the survivor, `while_held`
    called with the survivor's cache of partitions and what it held before the SIGTERM (with it, a
    topic `spare` of 2 partitions as well, the survivor leading some), the claim let go: the
    survivor's log once it exited, and the epoch it claimed."""
    from topiclake.objectlog.fence import BucketFence
    from topiclake.objectlog.keys import PartitionKeys

    proxy, root, direct = store_proxy
    with _producing(zookeeper, root, tmp_path, topic) as (brokers, before, producer):
        producer.stop(flush_s=60)
        survivor = next(b for b in (1, 2) if b != before.leader)
        cache = tmp_path / f"cache-{survivor}" / "log"
        if while_held is not None:
            create_topic(brokers, "spare", 2)
        claim = proxy.fail("PUT", rf"/log/{topic}-0/leader-epochs/\d+\.claim$", action=HOLD, times=None)
        brokers.kill(before.leader)
        wait_for(lambda: claim.hits > 0, 30, 0.05, what="the survivor's takeover at the store", detail=brokers.logs)
        epoch = int(re.search(r"/(\d+)\.claim$", claim.seen[0]).group(1))
        if claimed_first:
            BucketFence(direct, PartitionKeys(topic, 0)).claim(epoch, broker_id=before.leader)
        stopping = brokers.brokers[survivor]
        if while_held is not None:
            wait_for(lambda: any(name.startswith("spare-") for name in os.listdir(cache)), 30, 0.05,
                     what="the survivor leading a partition of spare", detail=brokers.logs)
        cached = sorted(os.listdir(cache))
        stopping.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: f"broker {survivor} shutting down" in stopping.log(), 30, 0.05,
                 what="the stop begun", detail=stopping.log)
        time.sleep(0.5)  # the cluster node's stop under way, the takeover still held
        if while_held is not None:
            while_held(cache, cached)
        assert stopping.proc.poll() is None, "stopped without waiting for the takeover in flight"
        proxy.clear(claim)
        assert stopping.proc.wait(60) == 0, stopping.log()
        return stopping.log(), epoch


def test_a_takeover_in_flight_when_the_broker_stops_is_let_go_before_the_session_closes(zookeeper, store_proxy,
                                                                                        tmp_path):
    """SIGTERM while a takeover waits for the store (its epoch claim held by the proxy): the stop
    waits for it, then lets that partition go like every other one it leads, before its ZooKeeper
    session closes. Before, the stop's list of partitions to let go was taken while the takeover
    was in flight: the log stayed open and the manager's close wrote its files into a partition
    that the next leader already owned."""
    topic = "stopped-mid-takeover"
    led_before: list[str] = []

    def others_let_go(cache: Path, cached: list[str]) -> None:
        """The survivor leads partitions of `spare` too: their resignations (each removes the
        partition's cache) do not wait for the held takeover."""
        def others(names: list[str]) -> list[str]:
            return [name for name in names if name.startswith("spare-")]
        led_before.extend(others(cached))
        wait_for(lambda: not others(os.listdir(cache)), 10, 0.05, what="the others let go during the held takeover",
                 detail=lambda: f"{others(os.listdir(cache))} of {led_before}")

    told, _epoch = _stopped_mid_takeover(zookeeper, store_proxy, tmp_path, topic, while_held=others_let_go)
    assert f"took over log/{topic}-0 at epoch" in told, told[-3000:]
    leading = re.findall(r"leads (\d+) partitions after", told)
    assert leading and leading[-1] == "0", leading  # the stop's summary: every partition let go
    assert re.search(r"closed 0 of 0 logs", told), told[-3000:]


def test_a_takeover_fenced_while_the_broker_stops_raises_no_epoch(zookeeper, store_proxy, tmp_path):
    """SIGTERM while a takeover waits for the store, and the epoch it claims taken meanwhile: its
    claim, released, is refused (fenced). A node that is not stopping then raises the state's epoch
    past the claim to lead again (the test above); a stopping one must not name itself leader at a
    new epoch in ZooKeeper on its way out: it lets the partition go, and the controller moves it."""
    topic = "fenced-mid-stop"
    told, epoch = _stopped_mid_takeover(zookeeper, store_proxy, tmp_path, topic, claimed_first=True)
    assert f"{topic}-0: not taking over at epoch {epoch}" in told, told[-3000:]
    assert "raising the leader epoch" not in told, told[-3000:]
    leading = re.findall(r"leads (\d+) partitions after", told)
    assert leading and leading[-1] == "0", leading
