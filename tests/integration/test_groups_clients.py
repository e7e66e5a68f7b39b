"""Consumer groups with real clients against a real broker process: kafka-python members in
their own processes (one killed with SIGKILL), offsets across a broker crash, confluent-kafka's
KIP-848 protocol, aiokafka, and the `topiclake groups` commands."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.broker_process import BrokerProcess
from topiclake.client.conn import BrokerConnection
from tests.support.topics import create_topic
from tests.support.waits import wait_for
from tests.support.clients import produce

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def groups_broker(tmp_path_factory, config_file):
    proc = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", config=config_file).start()
    yield proc
    assert proc.stop() == 0, proc.log()


# ------------------------------------------------------------ kafka-python, kill -9
class Member:
    def __init__(self, bootstrap: str, topic: str, group: str, path: Path):
        self.path = path
        self.proc = subprocess.Popen([sys.executable, str(HERE / "group_consumer.py"), bootstrap, topic, group,
                                      str(path)], cwd=HERE.parents[1], stdout=subprocess.DEVNULL,
                                     stderr=open(str(path) + ".stderr", "w"))

    def events(self) -> list[tuple[float, str, list[str]]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                out.append((float(parts[0]), parts[1], parts[2:]))
        return out

    def owned(self) -> set[int]:
        """Partitions held after the last assign/revoke event (eager protocol: revoke all, assign new)."""
        owned: set[int] = set()
        for _t, kind, args in self.events():
            parts = {int(p) for p in args[0].split(",")} if args and args[0] else set()
            if kind == "A":
                owned = parts
            elif kind == "R":
                owned -= parts
        return owned

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def summary(self) -> str:
        """For failure messages: liveness, consumed/committed/failed-commit counts, last group events."""
        events = self.events()
        counts = {k: sum(1 for _t, kind, _a in events if kind == k) for k in "CKE"}
        rebalances = [f"{kind} {','.join(args)}" for _t, kind, args in events if kind in "AR"][-4:]
        state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        return (f"{self.path.name}: {state}, owns {sorted(self.owned())}, read {counts['C']}, "
                f"committed {counts['K']}, failed commits {counts['E']}, last rebalance events {rebalances}")


def ownership_intervals(member: Member, end: float) -> list[tuple[int, float, float]]:
    intervals, since = [], {}
    for t, kind, args in member.events():
        parts = [int(p) for p in args[0].split(",")] if args and args[0] else []
        for p in parts:
            if kind == "A":
                since[p] = t
            elif kind == "R" and p in since:
                intervals.append((p, since.pop(p), t))
    intervals += [(p, t0, end) for p, t0 in since.items()]
    return intervals


def test_three_kafka_python_members_survive_a_kill(groups_broker, tmp_path):
    partitions, group = 7, f"kp-{uuid.uuid4().hex[:6]}"
    topic = create_topic(groups_broker.bootstrap, partitions)
    produce(groups_broker.bootstrap, topic, partitions, 20)
    members = [Member(groups_broker.bootstrap, topic, group, tmp_path / f"m{i}.events") for i in range(3)]

    def state():
        return "\n".join(m.summary() for m in members)

    try:
        wait_for(lambda: sorted(len(m.owned()) for m in members) == [2, 2, 3]
                 and set().union(*(m.owned() for m in members)) == set(range(partitions)), 60,
                 what="three members owning 3, 2, 2 partitions", interval=0.1, detail=state)
        # Records for every member to read in the final generation: on a slow machine one member can
        # start late and be given partitions the others already read to the end (then it commits nothing).
        produce(groups_broker.bootstrap, topic, partitions, 10, start=20)
        wait_for(lambda: all(any(k == "K" for _, k, _a in m.events()) for m in members), 30, what="commits by all",
                 interval=0.1, detail=state)
        victim = members[0]
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(10)
        killed_at = time.time()
        produce(groups_broker.bootstrap, topic, partitions, 30, start=30)
        survivors = members[1:]
        wait_for(lambda: set().union(*(m.owned() for m in survivors)) == set(range(partitions))
                 and not (survivors[0].owned() & survivors[1].owned()), 40,
                 what="two survivors owning all 7", interval=0.1, detail=state)

        def committed_to_end():
            last = {}
            for m in members:
                for _t, kind, args in m.events():
                    if kind == "K":
                        last[int(args[0])] = max(last.get(int(args[0]), 0), int(args[1]))
            return all(last.get(p) == 60 for p in range(partitions))

        wait_for(committed_to_end, 60, what="every partition committed to its end (60)", interval=0.1, detail=state)
    finally:
        for m in members:
            m.stop()
    # The takeover waited for the session timeout (the dead member was not heard from).
    takeover = min(t for m in members[1:] for t, kind, args in m.events()
                   if t > killed_at and kind == "A" and args)
    assert takeover - killed_at > 3.0
    # No partition owned by two members at the same time.
    end = time.time()
    intervals = [(p, a, b, i) for i, m in enumerate(members)
                 for p, a, b in ownership_intervals(m, killed_at if i == 0 else end)]
    for p, a, b, i in intervals:
        for q, c, d, j in intervals:
            if i < j and p == q:
                assert b <= c or d <= a, f"partition {p} owned by members {i} and {j} at once"
    # Nothing lost; nothing read again below an offset somebody had already committed.
    reads, commits = [], []
    for m in members:
        for t, kind, args in m.events():
            if kind == "C":
                reads.append((t, int(args[0]), int(args[1])))
            elif kind == "K":
                commits.append((t, int(args[0]), int(args[1])))
    assert {(p, o) for _t, p, o in reads} == {(p, o) for p in range(partitions) for o in range(60)}
    for t, p, o in reads:
        floor = max((off for tc, pc, off in commits if pc == p and tc < t), default=0)
        assert o >= floor, f"{p}@{o} read at {t} after offset {floor} was committed"


# ---------------------------------------------------------- offsets across a crash
def test_committed_offsets_survive_a_broker_crash(tmp_path, config_file):
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    proc = BrokerProcess(tmp_path / "data", config=config_file).start()
    try:
        topic = create_topic(proc.bootstrap, 2)
        produce(proc.bootstrap, topic, 2, 20)
        consumer = KafkaConsumer(topic, bootstrap_servers=proc.bootstrap, group_id="restart", enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=10000)
        seen = {0: [], 1: []}
        for record in consumer:
            seen[record.partition].append(record.offset)
            if all(len(v) >= 12 for v in seen.values()):
                break
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(12, "", -1) for p in (0, 1)})
        consumer.close()
        proc.kill()  # SIGKILL: no clean shutdown, the log is recovered on start
        proc = BrokerProcess(tmp_path / "data", proc.port, config=config_file).start()
        consumer = KafkaConsumer(topic, bootstrap_servers=proc.bootstrap, group_id="restart", enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=10000)
        resumed = {0: [], 1: []}
        for record in consumer:
            resumed[record.partition].append(record.offset)
            if all(len(v) >= 8 for v in resumed.values()):
                break
        assert resumed == {0: list(range(12, 20)), 1: list(range(12, 20))}
        assert consumer.committed(TopicPartition(topic, 0)) == 12
        consumer.close()
    finally:
        proc.kill()


# ------------------------------------------------- confluent-kafka, KIP-848 protocol
def test_confluent_kafka_consumer_protocol(groups_broker):
    from confluent_kafka import Consumer

    topic = create_topic(groups_broker.bootstrap, 4)
    produce(groups_broker.bootstrap, topic, 4, 10)
    conf = {"bootstrap.servers": groups_broker.bootstrap, "group.id": f"kip848-{uuid.uuid4().hex[:6]}",
            "group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    consumers = [Consumer(conf), Consumer(conf)]
    for c in consumers:
        c.subscribe([topic])
    got: dict[int, set[int]] = {}
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            for c in consumers:
                msg = c.poll(0.1)
                if msg is not None and msg.error() is None:
                    got.setdefault(msg.partition(), set()).add(msg.offset())
                    c.commit(message=msg, asynchronous=False)
            assignments = [{tp.partition for tp in c.assignment()} for c in consumers]
            if (all(len(got.get(p, ())) == 10 for p in range(4)) and all(assignments)
                    and not (assignments[0] & assignments[1]) and assignments[0] | assignments[1] == set(range(4))):
                break
        assert got == {p: set(range(10)) for p in range(4)}
        assert sorted(len(a) for a in assignments) == [2, 2], assignments
        from kio.schema.consumer_group_describe.v0 import request as req

        with BrokerConnection(groups_broker.bootstrap) as client:
            described = client.request(req.ConsumerGroupDescribeRequest(group_ids=(conf["group.id"],),
                                                                        include_authorized_operations=False))
        group = described.groups[0]
        assert group.error_code.value == 0 and len(group.members) == 2
        assert sorted(p for m in group.members for tp in m.assignment.topic_partitions for p in tp.partitions) == \
            [0, 1, 2, 3]
    finally:
        for c in consumers:
            c.close()


def test_kip848_regex_subscription_takes_in_a_topic_created_later(groups_broker):
    """A regex subscription (KIP-848: the broker matches it) gets the topics that match now and,
    within the coordinator's refresh (10 s), one created later; internal topics never match, and
    a regex that would take Python's `re` exponential time is RE2's linear time."""
    from confluent_kafka import Consumer
    from kio.schema.consumer_group_describe.v0 import request as req

    prefix = f"rx{uuid.uuid4().hex[:6]}"
    first = create_topic(groups_broker.bootstrap, 1, f"{prefix}-first")
    create_topic(groups_broker.bootstrap, 1, f"other-{prefix}")  # does not match: the regex is anchored
    create_topic(groups_broker.bootstrap, 1, "a" * 60 + f"-{prefix}")  # ([a-z-]+)+x: hours for Python's re
    produce(groups_broker.bootstrap, first, 1, 3)
    conf = {"bootstrap.servers": groups_broker.bootstrap, "group.id": f"kip848-rx-{prefix}", "group.protocol": "consumer",
            "auto.offset.reset": "earliest"}
    consumer = Consumer(conf)
    consumer.subscribe([f"^({prefix}-.*|__consumer_offsets|([a-z-]+)+x)"])
    got: dict[str, int] = {}

    def poll_until(done, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not done():
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[msg.topic()] = got.get(msg.topic(), 0) + 1

    try:
        poll_until(lambda: got.get(first) == 3, 30)
        assert got == {first: 3}
        later = create_topic(groups_broker.bootstrap, 2, f"{prefix}-later")
        produce(groups_broker.bootstrap, later, 2, 2)
        poll_until(lambda: got.get(later) == 4, 40)
        assert got == {first: 3, later: 4}
        assert {tp.topic for tp in consumer.assignment()} == {first, later}
        with BrokerConnection(groups_broker.bootstrap) as client:
            [member] = client.request(req.ConsumerGroupDescribeRequest(
                group_ids=(conf["group.id"],), include_authorized_operations=False)).groups[0].members
        assert f"^({prefix}-.*|" in member.subscribed_topic_regex  # librdkafka wraps it: "(^...)"
    finally:
        consumer.close()


# ------------------------------------- confluent-kafka, KIP-848 group across restarts
def _describe_consumer_group(bootstrap: str, group_id: str):
    from kio.schema.consumer_group_describe.v0 import request as req

    try:
        with BrokerConnection(bootstrap) as client:
            return client.request(req.ConsumerGroupDescribeRequest(group_ids=(group_id,),
                                                                   include_authorized_operations=False)).groups[0]
    except OSError:
        return None


def test_kip848_member_keeps_its_assignment_across_broker_restarts(tmp_path, config_file):
    """The group's records (types 3-8) are in __consumer_offsets: after a clean stop and after
    a SIGKILL the member heartbeats on with its member id and epoch; no rejoin at epoch 0, no
    revoke/lost callback, the same group epoch."""
    from confluent_kafka import Consumer

    proc = BrokerProcess(tmp_path / "data", config=config_file).start()
    events: list[tuple[str, list[int]]] = []
    consumer = None
    try:
        topic = create_topic(proc.bootstrap, 3)
        group_id = f"kip848-restart-{uuid.uuid4().hex[:6]}"
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": group_id, "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300})
        consumer.subscribe([topic], on_assign=lambda c, ps: events.append(("assign", [p.partition for p in ps])),
                           on_revoke=lambda c, ps: events.append(("revoke", [p.partition for p in ps])),
                           on_lost=lambda c, ps: events.append(("lost", [p.partition for p in ps])))

        def poll_until(predicate, timeout, what):
            def step():
                consumer.poll(0.1)
                return predicate()
            return wait_for(step, timeout, what=what, interval=0, detail=lambda: f"events {events}\n{proc.log()}")

        def described_member(min_epoch: int = 1):
            group = _describe_consumer_group(proc.bootstrap, group_id)
            if group is None or group.error_code.value != 0 or len(group.members) != 1:
                return None
            m = group.members[0]
            parts = sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions)
            return (m.member_id, m.member_epoch, group.group_epoch, parts) if m.member_epoch >= min_epoch else None

        poll_until(lambda: {tp.partition for tp in consumer.assignment()} == {0, 1, 2}, 30, "the assignment")
        before = poll_until(described_member, 10, "the described member")
        assert before[3] == [0, 1, 2] and events == [("assign", [0, 1, 2])], (before, events)

        for crash in (False, True):
            if crash:
                proc.kill()
            else:
                assert proc.stop() == 0, proc.log()
            for _ in range(5):  # the client notices the broker is gone
                consumer.poll(0.1)
            proc = BrokerProcess(tmp_path / "data", proc.port, config=config_file).start()
            after = poll_until(described_member, 20, "the group after the restart")
            assert after == before, (after, before)
            time.sleep(1.5)  # several heartbeat intervals: the member stays, nothing is rebalanced
            for _ in range(10):
                consumer.poll(0.1)
            assert poll_until(described_member, 5, "the member still there") == before
            assert events == [("assign", [0, 1, 2])], events
            assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2}
    finally:
        if consumer is not None:
            consumer.close()
        proc.kill()


# ------------------------------------------------------- aiokafka and the groups CLI
def cli(*args: str):
    from topiclake.cli import app

    return CliRunner().invoke(app, ["groups", *args])


def test_aiokafka_group_and_groups_cli(groups_broker):
    from aiokafka import AIOKafkaConsumer

    topic = create_topic(groups_broker.bootstrap, 3)
    produce(groups_broker.bootstrap, topic, 3, 10)
    group = f"aio-{uuid.uuid4().hex[:6]}"

    async def consume_some():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=groups_broker.bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            seen = set()
            while len(seen) < 30:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    seen |= {(r.partition, r.offset) for r in records}
            from aiokafka.structs import OffsetAndMetadata, TopicPartition

            await consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(7, "") for p in range(3)})
            out = cli("describe", group, "--bootstrap", groups_broker.bootstrap)
            lag = cli("lag", group, "--bootstrap", groups_broker.bootstrap)
            return seen, out, lag
        finally:
            await consumer.stop()

    seen, described, lag = asyncio.run(consume_some())
    assert len(seen) == 30
    assert described.exit_code == 0, described.output
    assert "State: Stable" in described.output and f"{topic}-0,{topic}-1,{topic}-2" in described.output
    assert "Host: /127.0.0.1" in described.output, described.output
    assert lag.exit_code == 0, lag.output
    rows = [line.split() for line in lag.output.splitlines() if line.startswith(topic)]
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [(str(p), "7", "10", "3") for p in range(3)]

    listed = cli("list", "--bootstrap", groups_broker.bootstrap)
    assert any(line.split()[:3] == [group, "classic", "Empty"] for line in listed.output.splitlines()), listed.output
    dry = cli("reset-offsets", group, "--topic", topic, "--to-earliest", "--bootstrap", groups_broker.bootstrap)
    assert dry.exit_code == 0 and "Dry run" in dry.output, dry.output
    assert "7" in cli("lag", group, "--bootstrap", groups_broker.bootstrap).output.splitlines()[1].split()[2]
    done = cli("reset-offsets", group, "--topic", topic, "--to-offset", "4", "--execute", "--bootstrap",
               groups_broker.bootstrap)
    assert done.exit_code == 0, done.output
    rows = [line.split() for line in cli("lag", group, "--bootstrap", groups_broker.bootstrap).output.splitlines()
            if line.startswith(topic)]
    assert [(r[2], r[4]) for r in rows] == [("4", "6")] * 3
