"""Fetch throughput: one confluent-kafka consumer reading --records records back from topiclake,
against the same consumer reading them from Apache Kafka.

Both brokers run side by side on this machine (one Apache Kafka node from the jars bin/fetch-peers
fetches, bench/_kafka.py; one `topiclake broker start` process) and get the same records (100-byte
values, lz4, as bench/produce.py writes them); one unmeasured read of each warms Kafka's JIT and
both brokers' caches. Then, in rounds alternating between the brokers (--repeat; each figure is
the median), one consumer (assign(), no group) reads them all. Beside it, the broker's side
alone: the records fetched by a client that only walks the batch headers (topiclake's kio
client, 8 MB per fetch), which shows when the consumer, not the broker, is the limit. "ratio" =
topiclake consumer records/s / Kafka consumer records/s (target >= 1.0). The last line is one JSON
object.

    python bench/fetch.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import cpu_seconds, create_topic
from _kafka import both_brokers, fetch_peers, median_of, runqueue_wait_seconds

VALUE_SIZE = 100
TOPIC = "bench-fetch"


def fill(bootstrap: str, records: int) -> None:
    from confluent_kafka import Producer

    create_topic(bootstrap, TOPIC)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(VALUE_SIZE // 2).hex().encode()
    for _ in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(120):
        raise SystemExit("could not produce the records to read back")


def consume(bootstrap: str, records: int, topic: str = TOPIC, partitions: int = 1) -> tuple[float, float, int]:
    """(seconds from the first record to the last, seconds including start-up, value bytes), one
    consumer assigned partitions 0 to `partitions` - 1 of `topic` from offset 0.

    Start-up (metadata, connection, the first fetch round trip) is a fixed latency, not
    throughput, so records/s is measured from the first record; the total is reported too.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused", "enable.auto.commit": False,
                         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608,
                         "queued.max.messages.kbytes": 262_144, "queued.min.messages": records,
                         # librdkafka's default 500 ms fetch wait would idle whenever the queue drains
                         "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = nbytes = 0
    start = time.perf_counter()
    first = None
    while count < records:
        for msg in consumer.consume(10_000, timeout=5):
            if msg.error() is not None:
                raise SystemExit(f"consumer error: {msg.error()}")
            nbytes += len(msg.value())
            count += 1
        if first is None and count:
            first = time.perf_counter()
        if time.perf_counter() - start > 300:
            raise SystemExit(f"only {count} of {records} records read")
    end = time.perf_counter()
    consumer.close()
    return end - first, end - start, nbytes


def raw_fetch(bootstrap: str, records: int) -> float:
    """The broker's side alone: Fetch requests from a client that does nothing with the bytes but
    walk the batch headers to the next offset (topiclake's kio client, 8 MB per fetch)."""
    import datetime

    from kio.schema.fetch.v12 import request as fetch_req

    from topiclake.client.conn import BrokerConnection
    from topiclake.segments.batch import iter_batches

    offset = 0
    start = time.perf_counter()
    with BrokerConnection(bootstrap) as client:
        while offset < records:
            req = fetch_req.FetchRequest(
                max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=52_428_800,
                topics=(fetch_req.FetchTopic(topic=TOPIC, partitions=(fetch_req.FetchPartition(
                    partition=0, fetch_offset=offset, partition_max_bytes=8_388_608),)),),
                forgotten_topics_data=())
            data = client.request(req).responses[0].partitions[0].records
            for batch in iter_batches(data, validate=False):
                offset = batch.header.next_offset
    return time.perf_counter() - start


def measure(bootstrap: str, pid: int, records: int) -> dict:
    """One round against one broker: the consumer, then the broker's side alone."""
    cpu_before, wait_before = cpu_seconds(pid), runqueue_wait_seconds(pid)
    elapsed, with_startup, nbytes = consume(bootstrap, records)
    cpu, wait = cpu_seconds(pid) - cpu_before, runqueue_wait_seconds(pid) - wait_before
    raw = raw_fetch(bootstrap, records)
    return {"records_per_s": records / elapsed, "mb_per_s": nbytes / elapsed / 1e6,
            "records_per_s_including_startup": records / with_startup, "broker_cpu_s": cpu,
            "broker_runqueue_wait_s": wait,
            # The broker's side alone, to a client that only walks batch headers: when this is far
            # above records_per_s, the consumer (librdkafka decode + the Python loop) is the limit.
            "raw_fetch_records_per_s": records / raw}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the brokers (medians count)")
    args = parser.parse_args()
    kafka_version = fetch_peers("kafka")["KAFKA_VERSION"]
    rounds: dict[str, list[dict]] = {"kafka": [], "topiclake": []}
    with both_brokers() as brokers:
        for bootstrap, _data, _pid in brokers.values():
            fill(bootstrap, args.records)
            consume(bootstrap, args.records)  # warm-up: JIT, page cache, the broker's own caches
        for i in range(args.repeat):
            for name, (bootstrap, _data, pid) in brokers.items():
                rounds[name].append(measure(bootstrap, pid, args.records))
                print(f"round {i + 1}, {name}: " + ", ".join(f"{k} {v:,.2f}" for k, v in rounds[name][-1].items()),
                      flush=True)
    ours, kafka = median_of(rounds["topiclake"]), median_of(rounds["kafka"])
    result = {"bench": "fetch", "records": args.records, "value_bytes": VALUE_SIZE, "kafka_version": kafka_version,
              "rounds": args.repeat, **{f"topiclake_{k}": round(v, 3) for k, v in ours.items()},
              **{f"kafka_{k}": round(v, 3) for k, v in kafka.items()},
              "ratio": round(ours["records_per_s"] / kafka["records_per_s"], 3),
              "raw_fetch_ratio": round(ours["raw_fetch_records_per_s"] / kafka["raw_fetch_records_per_s"], 3),
              "target_ratio": 1.0}
    print(f"medians of {args.repeat} rounds: one consumer: topiclake {ours['records_per_s']:,.0f} records/s, Apache "
          f"Kafka {kafka_version} {kafka['records_per_s']:,.0f} (ratio {result['ratio']}); the brokers alone, to a "
          f"header-walking client: {ours['raw_fetch_records_per_s']:,.0f} vs {kafka['raw_fetch_records_per_s']:,.0f} "
          f"records/s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
