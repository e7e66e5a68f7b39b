"""Transactions against a real broker process and real clients: broker restarts (clean, and
kill -9 with a transaction open) keep the transaction state, and a consume-transform-produce
process killed with kill -9 mid-transaction and restarted writes every input exactly once."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic
from tests.support.clients import read_all, committed_offsets

pytestmark = pytest.mark.slow


def test_broker_restarts_between_and_during_transactions(tmp_path):
    from confluent_kafka import Producer

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create_topic(broker.bootstrap, partitions=2)
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "restarts",
                      "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
        p.init_transactions(20)
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, value=b"one-%d" % i, partition=i % 2)
        p.commit_transaction(20)

        assert broker.stop() == 0  # a clean restart between transactions
        broker = BrokerProcess(tmp_path / "data", port=broker.port).start()
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, value=b"two-%d" % i, partition=i % 2)
        p.flush(20)
        broker.kill()  # a crash with the transaction open: its data is on disk, its state Ongoing
        broker = BrokerProcess(tmp_path / "data", port=broker.port).start()
        p.commit_transaction(30)

        p.begin_transaction()
        p.produce(topic, value=b"three-aborted", partition=0)
        p.flush(20)
        p.abort_transaction(20)

        got = read_all(broker.bootstrap, topic, 2, "read_committed", 8)
        assert sorted(got) == sorted([b"one-%d" % i for i in range(4)] + [b"two-%d" % i for i in range(4)])
        assert len(read_all(broker.bootstrap, topic, 2, "read_uncommitted", 9)) == 9
    finally:
        broker.kill()


def _transformer(bootstrap: str, topic_in: str, topic_out: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "integration" / "txn_transform.py"), "--bootstrap", bootstrap,
         "--transactional-id", "transformer", "--group", "xform", "--input", topic_in, "--output", topic_out,
         "--partitions", "2", "--batch", "7", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)


def test_consume_transform_produce_is_exactly_once_across_kill_9(tmp_path):
    from confluent_kafka import Producer

    broker = BrokerProcess(tmp_path / "data").start()
    procs: list[subprocess.Popen] = []
    try:
        topic_in = create_topic(broker.bootstrap, partitions=2)
        topic_out = create_topic(broker.bootstrap, partitions=2)
        inputs = [b"in-%03d" % i for i in range(60)]
        p = Producer({"bootstrap.servers": broker.bootstrap})
        for i, v in enumerate(inputs):
            p.produce(topic_in, value=v, partition=i % 2)
        p.flush(20)

        first = _transformer(broker.bootstrap, topic_in, topic_out, "--hang-at", "3")
        procs.append(first)
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = first.stdout.readline()
            assert line, f"transformer exited early: {lines}"
            lines.append(line.strip())
            if line.startswith("HANG"):
                break
        assert lines[-1].startswith("HANG"), lines
        first.kill()  # kill -9 with the third transaction written but not committed
        first.wait(10)
        done_in_two = sum(int(line.split()[2]) for line in lines if line.startswith("COMMIT"))
        # the group's offsets moved with the two committed transactions only
        assert sum(max(o, 0) for o in committed_offsets(broker.bootstrap, "xform", topic_in, 2)) == done_in_two
        uncommitted_out = read_all(broker.bootstrap, topic_out, 2, "read_uncommitted", done_in_two + 1, timeout=5)
        assert len(uncommitted_out) > done_in_two  # the hung transaction's records are in the log

        second = _transformer(broker.bootstrap, topic_in, topic_out, "--idle-s", "1.5")
        procs.append(second)
        out, _ = second.communicate(timeout=90)
        assert second.returncode == 0, out

        got = read_all(broker.bootstrap, topic_out, 2, "read_committed", len(inputs))
        counts = Counter(got)
        assert set(counts) == {v + b":out" for v in inputs}
        assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1]
        assert committed_offsets(broker.bootstrap, "xform", topic_in, 2) == [30, 30]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        broker.kill()
