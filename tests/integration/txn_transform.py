"""A consume-transform-produce loop with confluent-kafka transactions, run as its own process by
test_transactions.py (which kills it with SIGKILL mid-transaction and starts it again).

Each transaction: read up to --batch input records (read_committed), write one output record per
input ("<value>:out"), send the consumer's positions with send_offsets_to_transaction, commit.
The start position comes from the group's committed offsets, so a restarted instance resumes
exactly where the last committed transaction ended. With --hang-at N the N-th transaction stops
after writing and sending offsets (prints HANG) and waits to be killed. Exits after --idle-s
seconds without input.
"""

from __future__ import annotations

import argparse
import sys
import time

import confluent_kafka as ck


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--hang-at", type=int, default=0)
    ap.add_argument("--idle-s", type=float, default=2.0)
    args = ap.parse_args()

    producer = ck.Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
                            "linger.ms": 5})
    producer.init_transactions(30)  # fences a previous instance and aborts its open transaction
    consumer = ck.Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    tps = [ck.TopicPartition(args.input, p) for p in range(args.partitions)]
    committed = consumer.committed(tps, 30)
    consumer.assign([ck.TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else ck.OFFSET_BEGINNING)
                     for tp in committed])
    print("START", " ".join(f"{tp.partition}:{tp.offset}" for tp in committed), flush=True)

    txns = 0
    idle_since = time.monotonic()
    while True:
        msgs = [m for m in consumer.consume(args.batch, timeout=0.5) if not m.error()]
        if not msgs:
            if time.monotonic() - idle_since > args.idle_s:
                break
            continue
        idle_since = time.monotonic()
        txns += 1
        producer.begin_transaction()
        for m in msgs:
            producer.produce(args.output, value=m.value() + b":out", partition=m.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        if txns == args.hang_at:
            producer.flush(30)
            print("HANG", txns, flush=True)
            time.sleep(3600)
        producer.commit_transaction(30)
        print("COMMIT", txns, len(msgs), flush=True)
    consumer.close()
    print("DONE", txns, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
