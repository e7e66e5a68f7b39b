"""The leader faults both cluster kinds (a directory root, a bucket) are tested under while
producers run: kill -9 of partition 1's leader, then SIGSTOP of partition 0's leader with a
produce request of ours on its socket, each followed by the failover and the preferred leaders'
return."""

from __future__ import annotations

import threading
import time

from kio.schema.errors import ErrorCode

from topiclake.client.conn import BrokerConnection

from tests.support.cluster_brokers import ClusterBrokers
from tests.support.cluster_clients import Ledger, metadata, produce_request, raw_batch
from tests.support.cluster_topics import settled
from tests.support.waits import wait_for

STALE_VALUE = b"written by a paused leader"  # the paused leader's late produce: never to be read


def leader_of(brokers: ClusterBrokers, topic: str, partition: int) -> int:
    return metadata(brokers.bootstrap_of(brokers.live()[0]), topic).partitions[partition].leader


def kill_then_pause_leaders(brokers: ClusterBrokers, topic: str, partitions: int, ledger: Ledger, *,
                            acked_again_s: float = 20.0) -> float:
    """Both faults in turn; returns the seconds from the kill -9 until partition 1 acknowledged
    again. The paused leader's late produce must be answered NOT_LEADER_OR_FOLLOWER."""
    killed = leader_of(brokers, topic, 1)
    brokers.kill(killed)
    killed_at, acked = time.monotonic(), len(ledger.acked)
    wait_for(lambda: settled(brokers, topic, partitions), 20, what="the failover after kill -9")
    wait_for(lambda: ledger.acked_since(1, acked) >= 10, acked_again_s, what="partition 1 acknowledging again")
    failover_s = time.monotonic() - killed_at
    brokers.restart(killed)
    wait_for(lambda: settled(brokers, topic, partitions, preferred=True), 30, what="the preferred leaders back")

    paused = leader_of(brokers, topic, 0)
    stale_client = BrokerConnection(brokers.bootstrap_of(paused), timeout=60)
    answers = []
    brokers.pause(paused)
    late = threading.Thread(target=lambda: answers.append(
        stale_client.request(produce_request(topic, 0, raw_batch(STALE_VALUE))).responses[0]
        .partition_responses[0]))
    late.start()
    acked = len(ledger.acked)
    wait_for(lambda: settled(brokers, topic, partitions), 20, what="the failover of the paused leader")
    wait_for(lambda: ledger.acked_since(0, acked) >= 10, acked_again_s,
             what="partition 0 acknowledging on its new leader")
    brokers.resume(paused)
    late.join(30)
    stale_client.close()
    assert answers and answers[0].error_code == ErrorCode.not_leader_or_follower, answers
    wait_for(lambda: settled(brokers, topic, partitions, preferred=True), 30, what="the preferred leaders back")
    time.sleep(1)
    return failover_s
