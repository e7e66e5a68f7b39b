"""Produce throughput into the broker vs plain file appends, and p99 latency at 1,000 records/s.

One confluent-kafka producer (lz4, linger 5 ms, 1 MB batches, 100-byte values, acks=all) sends
--records records to one partition of a real broker process; the baseline appends the same
value bytes to a file in 1 MB writes in the same run. Then a second producer sends 1,000
records/s with acks=all (linger 0) for --latency-seconds and reports delivery latency.
The last line is one JSON object; "ratio" = broker MB/s / file-append MB/s.

    python bench/produce.py [--records 2000000] [--latency-seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import cpu_seconds, create_topic, mock_cluster, running_broker  # noqa: E402

VALUE_SIZE = 100


def produce_throughput(bootstrap: str, records: int, *, create: bool = True) -> float:
    from confluent_kafka import Producer

    if create:
        create_topic(bootstrap, "bench-produce")
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5,
                         "batch.size": 1_000_000, "message.max.bytes": 2_000_000, "acks": "all",
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    value = os.urandom(VALUE_SIZE // 2).hex().encode()  # 100 bytes, compressible like text
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce("bench-produce", value=value, key=None, partition=0,
                                 on_delivery=on_delivery if i % 1000 == 0 else None)
                break
            except BufferError:
                producer.poll(0.001)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining or errors:
        raise SystemExit(f"produce failed: {remaining} undelivered, errors {errors[:3]}")
    return elapsed


def file_append(records: int) -> float:
    chunk = os.urandom(VALUE_SIZE // 2).hex().encode() * (1_000_000 // VALUE_SIZE)
    total = records * VALUE_SIZE
    with tempfile.NamedTemporaryFile(prefix="topiclake-bench-append-") as f:
        start = time.perf_counter()
        written = 0
        while written < total:
            n = min(len(chunk), total - written)
            f.write(chunk[:n])
            written += n
        f.flush()
        os.fsync(f.fileno())  # the broker's data reaches the page cache; include one flush for fairness
        return time.perf_counter() - start


def latency(bootstrap: str, seconds: float, rate: int = 1000) -> dict:
    from confluent_kafka import Producer

    create_topic(bootstrap, "bench-latency")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": True,
                         "socket.nagle.disable": True})  # one record per request: no Nagle delay
    latencies = []

    def on_delivery(err, msg):
        if err is None:
            latencies.append(time.perf_counter() - float(msg.value()[:20]))

    value_pad = b"x" * (VALUE_SIZE - 20)
    producer.produce("bench-latency", value=f"{time.perf_counter():<20.6f}".encode() + value_pad,
                     on_delivery=on_delivery)
    producer.flush(10)  # warm-up: connection, metadata, producer id
    latencies.clear()
    start = time.perf_counter()
    n = int(seconds * rate)
    for i in range(n):
        target = start + i / rate
        while (now := time.perf_counter()) < target:
            producer.poll(max(0.0, min(target - now, 0.0005)))
        producer.produce("bench-latency", value=f"{time.perf_counter():<20.6f}".encode() + value_pad,
                         on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(30)
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return {"latency_records": len(latencies), "p50_ms": round(pick(0.50), 3), "p99_ms": round(pick(0.99), 3),
            "max_ms": round(latencies[-1] * 1000, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    args = parser.parse_args()

    with running_broker() as (bootstrap, _data, pid):
        cpu_before = cpu_seconds(pid)
        elapsed = produce_throughput(bootstrap, args.records)
        broker_cpu = cpu_seconds(pid) - cpu_before
        # The throughput phase leaves hundreds of MB of dirty pages: written back first, so the
        # latency phase measures 1k/s on its own, not the kernel's writeback of the burst before.
        os.sync()
        lat = latency(bootstrap, args.latency_seconds) if args.latency_seconds > 0 else {}
    with mock_cluster() as mock:  # the same client loop against a no-op broker: the client's own limit
        client_limit = produce_throughput(mock, args.records, create=False)
    baseline = file_append(args.records)
    mb = args.records * VALUE_SIZE / 1e6
    result = {
        "bench": "produce", "records": args.records, "value_bytes": VALUE_SIZE,
        "records_per_s": round(args.records / elapsed), "mb_per_s": round(mb / elapsed, 1),
        "file_append_mb_per_s": round(mb / baseline, 1), "ratio": round(baseline / elapsed, 4),
        # The broker's own cost: on 2 shared cores the Python client's produce() loop is the limit,
        # so also report how many records/s one core of broker CPU absorbs.
        "broker_cpu_s": round(broker_cpu, 2),
        "broker_records_per_cpu_s": round(args.records / broker_cpu) if broker_cpu else None,
        "client_limit_records_per_s": round(args.records / client_limit),  # vs librdkafka's mock broker
        "target_records_per_s": 300_000, "target_p99_ms": 10, **lat,
    }
    print(f"broker: {result['records_per_s']:,} records/s, {result['mb_per_s']} MB/s of values; "
          f"file append: {result['file_append_mb_per_s']} MB/s; p99 at 1k/s acks=all: {lat.get('p99_ms')} ms; "
          f"the same client against a no-op (mock) broker: {result['client_limit_records_per_s']:,} records/s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
