"""One group of confluent-kafka members that consume and commit together, and the group's type as an admin client describes it: the migration tests' tools."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from tests.support.waits import wait_for


PARTITIONS = 4


class Group:
    """The members of one group, consumed together: every record read, every offset committed
    (synchronously, one record at a time), and any record read again after its commit."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self.group_id = f"migrate-{uuid.uuid4().hex[:8]}"
        self.members: dict[str, Consumer] = {}
        self.read: dict[int, set[int]] = {}
        self.committed: set[tuple[int, int]] = set()
        self.read_again_after_commit: list[tuple[str, int, int]] = []

    def add(self, name: str, protocol: str) -> None:
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group_id, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                         "partition.assignment.strategy": "range"})
        consumer = self.members[name] = Consumer(conf)
        consumer.subscribe([self.topic])

    def close(self, name: str) -> None:
        self.members.pop(name).close()

    def pump(self, seconds: float = 0.5) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, consumer in self.members.items():
                msg = consumer.poll(0.02)
                if msg is None or msg.error() is not None:
                    continue
                where = (msg.partition(), msg.offset())
                if where in self.committed:
                    self.read_again_after_commit.append((name, *where))
                self.read.setdefault(msg.partition(), set()).add(msg.offset())
                try:
                    consumer.commit(message=msg, asynchronous=False)
                    self.committed.add(where)
                except KafkaException:
                    pass  # a rebalance got in between: the next owner reads it again (allowed)

    def assignments(self) -> dict[str, set[int]]:
        return {name: {tp.partition for tp in c.assignment()} for name, c in self.members.items()}

    def settle(self, counts: list[int], what: str, timeout: float = 60) -> None:
        """Consume until the members' assignment sizes are `counts` and cover every partition once."""
        def settled():
            self.pump(0.3)
            owned = list(self.assignments().values())
            return (sorted(len(a) for a in owned) == sorted(counts) and set().union(*owned) == set(range(PARTITIONS))
                    and sum(map(len, owned)) == PARTITIONS)
        wait_for(settled, timeout, what=what, interval=0, detail=lambda: f"assignments {self.assignments()}")

    def read_up_to(self, per_partition: int, timeout: float = 60) -> None:
        wait_for(lambda: self.pump(0.3) or all(self.read.get(p, set()) >= set(range(per_partition))
                                               for p in range(PARTITIONS)),
                 timeout, what=f"{per_partition} records per partition", interval=0,
                 detail=lambda: f"read {({p: len(o) for p, o in self.read.items()})}, {self.assignments()}")

    def close_all(self) -> None:
        for name in list(self.members):
            self.close(name)


def group_type(bootstrap: str, group_id: str) -> str:
    """CLASSIC or CONSUMER, as the admin client describes the group (waiting while it loads)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def described():
        try:
            return admin.describe_consumer_groups([group_id])[group_id].result(30).type.name
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.COORDINATOR_LOAD_IN_PROGRESS:
                raise
            return None
    return wait_for(described, 20, what=f"group {group_id} loaded", interval=0.1)
