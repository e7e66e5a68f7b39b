"""The table as the archive (issue 32, docs/ARCHIVE.md): fetch throughput of records served from a
topic's Delta table against the same records served from local segments, and the storage each
takes.

One `topiclake broker start` process; two topics get the same --records records (keys, 100-byte
hex values from 1,000 random ones, one header, lz4): `bench-local` keeps its log, `bench-archived` has
remote.storage.enable and local.retention.ms=1; the real ingest job (one Spark application,
local[2]) writes bench-archived's table, then `topiclake retain` deletes its closed segments. In
rounds alternating between the topics (--repeat; each figure is the median) one confluent-kafka
consumer (assign(), no group) reads every record from offset 0. "ratio" = records/s from the
table / records/s from the log (target >= 0.5). Storage: the log's segment bytes against the
table's Parquet bytes. The last line is one JSON object.

    python bench/archive.py [--records 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import create_topic, running_broker
from fetch import consume  # one confluent-kafka consumer from offset 0: (first-to-last s, total s, bytes)

LOCAL, ARCHIVED = "bench-local", "bench-archived"
VALUE_SIZE = 100
SEGMENT_BYTES = 1024 * 1024


def fill(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5,
                         "batch.size": 256_000, "queue.buffering.max.messages": 1_000_000})
    values = [os.urandom(VALUE_SIZE // 2).hex().encode() for _ in range(1000)]  # hex: lz4 halves it, as real text
    for i in range(records):
        value = values[i % len(values)]
        while True:
            try:
                producer.produce(topic, key=b"key-%d" % (i % 10_000), value=value, partition=0,
                                 headers=[("source", b"bench")])
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(120):
        raise SystemExit(f"could not produce the records of {topic}")


def directory_bytes(path: Path, suffix: str) -> int:
    return sum(f.stat().st_size for f in path.rglob(f"*{suffix}") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from topiclake.lake.runs.ingest import IngestOptions, ingest
    from topiclake.lake.runs.retention import RetentionOptions, retain
    from topiclake.lake.spark.session import get_session
    from topiclake.segments.storage import StorageLayout

    with running_broker() as (bootstrap, data, _pid):
        create_topic(bootstrap, LOCAL, **{"segment.bytes": str(SEGMENT_BYTES)})
        create_topic(bootstrap, ARCHIVED, **{"segment.bytes": str(SEGMENT_BYTES), "remote.storage.enable": "true",
                                             "local.retention.ms": "1"})
        for topic in (LOCAL, ARCHIVED):
            fill(bootstrap, topic, args.records)
        log_dir = StorageLayout(data).log_dir(ARCHIVED, 0)
        log_bytes = directory_bytes(log_dir, ".log")
        spark = get_session("bench-archive", master="local[2]")
        started = time.perf_counter()
        ingested = ingest(spark, IngestOptions(topics=(ARCHIVED,), root=data, bootstrap=bootstrap))
        ingest_s = time.perf_counter() - started
        spark.stop()
        assert ingested.records == args.records, ingested.records
        retained = retain(RetentionOptions(root=data, topics=(ARCHIVED,)))
        [partition] = retained.partitions
        table_bytes = directory_bytes(data / "tables" / ARCHIVED, ".parquet")
        local_left = directory_bytes(log_dir, ".log")
        time.sleep(6)  # the broker's refresh (every 5 s) sees the new log start
        rounds: dict[str, list[float]] = {LOCAL: [], ARCHIVED: []}
        consume(bootstrap, args.records, LOCAL)  # warm the page cache and the clients
        for _ in range(args.repeat):
            for topic in (LOCAL, ARCHIVED):
                rounds[topic].append(consume(bootstrap, args.records, topic)[0])
    local_s, table_s = (statistics.median(rounds[t]) for t in (LOCAL, ARCHIVED))
    result = {
        "records": args.records, "segments_deleted": len(partition.deleted), "log_start": partition.log_start_offset,
        "from_log_records_per_s": round(args.records / local_s),
        "from_table_records_per_s": round(args.records / table_s),
        "ratio": round(local_s / table_s, 3), "target": 0.5,
        "log_bytes": log_bytes, "table_bytes": table_bytes, "storage_ratio": round(table_bytes / log_bytes, 3),
        "local_log_bytes_after_retention": local_left, "ingest_s": round(ingest_s, 2),
        "rounds_s": {t: [round(s, 3) for s in v] for t, v in rounds.items()},
    }
    print(f"from the log: {result['from_log_records_per_s']:,} records/s; from the table: "
          f"{result['from_table_records_per_s']:,} records/s (ratio {result['ratio']}); log {log_bytes:,} bytes, "
          f"table {table_bytes:,} bytes ({result['storage_ratio']} of the log)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
