"""One kafka-python group member in its own process (so a test can kill -9 it).

Usage: python group_consumer.py BOOTSTRAP TOPIC GROUP EVENTS_FILE

Appends one line per event to EVENTS_FILE, each flushed at once (a killed process loses
nothing it reported):  `<time> A <p,p,..>` assigned, `<time> R <p,p,..>` revoked,
`<time> C <p> <offset>` consumed, `<time> K <p> <offset>` committed (offset = next to read).
Commits synchronously after every poll, before reading more.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition


def main() -> None:
    bootstrap, topic, group, path = sys.argv[1:5]
    out = open(path, "a", buffering=1)

    def emit(line: str) -> None:
        out.write(f"{time.time():.6f} {line}\n")
        out.flush()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit("R " + ",".join(str(tp.partition) for tp in sorted(revoked)))

        def on_partitions_assigned(self, assigned):
            emit("A " + ",".join(str(tp.partition) for tp in sorted(assigned)))

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=1000,
                             max_poll_records=5, fetch_max_wait_ms=100, client_id=f"member-{Path(path).stem}")
    consumer.subscribe([topic], listener=Listener())
    # Know the topic's partitions before the first poll (which joins the group). Otherwise a
    # member that becomes leader may assign before its metadata has the topic (an empty
    # assignment), then rejoin once the metadata arrives; kafka-python (3.0.12) stalls for good if
    # poll()'s timeout runs out while that rejoin is in flight: the leader's assignment already
    # cleared the metadata trigger, so need_rejoin() is False and the finished JoinGroup/SyncGroup
    # is never picked up. The member never gets its partitions nor heartbeats again, and the
    # broker rightly drops it after the session timeout.
    while not consumer.partitions_for_topic(topic):
        time.sleep(0.1)
    while True:
        batches = consumer.poll(timeout_ms=200)
        if not batches:
            continue
        commit = {}
        for tp, records in batches.items():
            for r in records:
                emit(f"C {tp.partition} {r.offset}")
            commit[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
        time.sleep(0.05)  # "processing": keeps the stream going while the test kills a member
        try:
            consumer.commit(commit)
        except Exception as exc:  # a rebalance got in between: the next owner re-reads these
            emit(f"E {type(exc).__name__}")
            continue
        for tp, meta in commit.items():
            emit(f"K {tp.partition} {meta.offset}")


if __name__ == "__main__":
    main()
