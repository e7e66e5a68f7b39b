"""Benchmark: Kafka segments -> Delta table with topiclake's Spark ingest (local[2]) against the
path a user would write by hand (a confluent-kafka consumer fetching from the broker -> pyarrow ->
deltalake.write_deltalake), over the same records, in one run.

The records (16-byte keys, 100-byte values, batches of 1000, no compression by default) are
written once as real segment files through the segment Log (indexes and all); the broker serves
those files to the consumer. Both paths write the same table layout (the lake's columns,
partitioned by record_date). topiclake's time is one `ingest()` call on a started Spark session
(planning, decoding in executors, the great-expectations gate, the commit). It runs twice, into
two new tables: the first run of the application also pays its one-time costs (Python workers
start, Arrow and great-expectations load in each of them: seconds on 2 cores, whatever the data
size), the second is the steady state of a running application and gives "ratio"; both are
printed. The hand-written path's time runs from the consumer's creation to its last write (the
broker already started).
Wall-clock rates: the machine may be shared, so both are measured back to back. The hand-written
path has no exactly-once (no offsets are stored with the data), which only flatters it.

    python bench/ingest.py                    # 3 million records
    python bench/ingest.py --records 500000   # quicker

The last line is one JSON object; "ratio" is topiclake's steady-state records/s / hand-written
records/s, "ratio_first_run" the same for the application's first run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from _broker import running_broker  # noqa: E402
from _data import RECORDS_PER_BATCH, template_batch  # noqa: E402
from topiclake.segments.batch import set_base_offset  # noqa: E402
from topiclake.segments.config import LogConfig  # noqa: E402
from topiclake.segments.log import Log  # noqa: E402
from topiclake.segments.storage import StorageLayout, TopicRegistry  # noqa: E402

TOPIC = "bench"
TEMPLATES = 8
SEGMENT_BYTES = 64 * 1024 * 1024


def write_topic(root: Path, records: int, partitions: int, codec: str) -> int:
    """Segment files through the Log (it assigns offsets, builds indexes, closes cleanly)."""
    TopicRegistry(StorageLayout(root)).create(TOPIC, partitions, {"segment.bytes": str(SEGMENT_BYTES)})
    templates = [template_batch(seed, codec, base_timestamp=1_714_521_600_000, spread_ms=3_600_000) for seed in range(TEMPLATES)]
    config = LogConfig.from_properties({"segment.bytes": str(SEGMENT_BYTES)})
    batches = records // RECORDS_PER_BATCH
    written = 0
    for p in range(partitions):
        log = Log.open(StorageLayout(root).log_dir(TOPIC, p), config, topic=TOPIC, partition=p)
        mine = [i for i in range(batches) if i % partitions == p]
        for start in range(0, len(mine), 64):
            chunk = bytearray(b"".join(templates[i % TEMPLATES] for i in mine[start:start + 64]))
            log.append(chunk, assign_offsets=True)
            written += len(mine[start:start + 64]) * RECORDS_PER_BATCH
        log.close()
    return written


def run_topiclake(root: Path, master: str) -> list[tuple[float, float, int]]:
    """(seconds, seconds in the quality gate's driver part, records) of two ingests of the same
    records into two new tables on one started session: the first pays the application's
    one-time costs (Python workers, Arrow, great-expectations imported in each worker), the
    second is the steady state of a running application."""
    from topiclake.lake import quality
    from topiclake.lake.ingest import IngestOptions, ingest
    from topiclake.lake.spark import get_session

    spark = get_session("bench-ingest", master=master, conf={"spark.ui.enabled": "false",
                                                             "spark.ui.showConsoleProgress": "false",
                                                             "spark.driver.memory": "1g"})
    spark.range(4).count()  # the JVM is up and a first job ran: JVM start-up is not counted
    spent = [0.0]
    validate = quality.validate

    def timed_validate(*args, **kwargs):
        t = time.perf_counter()
        try:
            return validate(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t

    quality.validate = timed_validate
    runs = []
    try:
        for table in ("first-run", "steady-state"):
            spent[0] = 0.0
            started = time.perf_counter()
            result = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, table=table, bootstrap="none"))
            runs.append((time.perf_counter() - started, spent[0], result.records))
    finally:
        quality.validate = validate
    return runs


def run_hand_written(bootstrap: str, uri: str, partitions: int, total: int, chunk: int) -> tuple[float, int]:
    """What a user would write: consume everything, build Arrow columns, append to Delta."""
    from confluent_kafka import Consumer, TopicPartition
    from deltalake import write_deltalake

    started = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hand-written", "enable.auto.commit": False,
                         "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                         "queued.max.messages.kbytes": 256 * 1024})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    columns: dict[str, list] = {k: [] for k in ("partition", "offset", "timestamp", "timestamp_type", "key", "value",
                                                 "headers")}
    done = 0
    while done < total:
        for m in consumer.consume(num_messages=10_000, timeout=1.0):
            if m.error() is not None:
                raise RuntimeError(str(m.error()))
            ts_type, ts = m.timestamp()
            columns["partition"].append(m.partition())
            columns["offset"].append(m.offset())
            columns["timestamp"].append(ts)
            columns["timestamp_type"].append(ts_type - 1)
            columns["key"].append(m.key())
            columns["value"].append(m.value())
            columns["headers"].append([{"key": k, "value": v} for k, v in m.headers() or ()])
            done += 1
        if len(columns["offset"]) >= chunk or (done >= total and columns["offset"]):
            write_deltalake(uri, _to_arrow(columns), mode="append", partition_by=["record_date"])
            columns = {k: [] for k in columns}
    consumer.close()
    return time.perf_counter() - started, done


def _to_arrow(columns: dict[str, list]) -> pa.Table:
    n = len(columns["offset"])
    timestamp = pa.array(columns["timestamp"], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    return pa.table({
        "topic": pa.array([TOPIC] * n, pa.string()),
        "partition": pa.array(columns["partition"], pa.int32()),
        "offset": pa.array(columns["offset"], pa.int64()),
        "timestamp": timestamp.cast(pa.timestamp("us", tz="UTC")),
        "timestamp_type": pa.array(columns["timestamp_type"], pa.int8()),
        "key": pa.array(columns["key"], pa.binary()),
        "value": pa.array(columns["value"], pa.binary()),
        "headers": pa.array(columns["headers"], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "ingested_at": pa.array([int(time.time() * 1e6)] * n, pa.timestamp("us", tz="UTC")),
        "record_date": pc.cast(timestamp, pa.date32()),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=3_000_000, help="records to ingest (default 3 million)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--codec", default="none", help="batch compression: none, lz4, zstd, ...")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--chunk", type=int, default=500_000, help="records per write_deltalake call, hand-written")
    parser.add_argument("--values", choices=("raw", "avro"), default="raw",
                        help="avro: typed-table ingest of Avro values against raw-bytes ingest (avro_mode below)")
    args = parser.parse_args()
    if args.values == "avro":
        return avro_mode(args)

    with tempfile.TemporaryDirectory(prefix="topiclake-bench-ingest-") as tmp:
        root = Path(tmp) / "data"
        t = time.perf_counter()
        total = write_topic(root, args.records, args.partitions, args.codec)
        print(f"wrote {total} records as segments in {time.perf_counter() - t:.1f} s")

        (cold_s, cold_quality_s, cold_records), (seconds, quality_s, ingested) = run_topiclake(root, args.master)
        assert ingested == cold_records == total, (cold_records, ingested, total)
        ours, ours_cold = total / seconds, total / cold_s
        print(f"topiclake ingest ({args.master}), first run of the application: {cold_s:.1f} s, "
              f"{ours_cold:,.0f} records/s")
        print(f"topiclake ingest ({args.master}), steady state: {seconds:.1f} s, {ours:,.0f} records/s "
              f"(of which the driver's part of the great-expectations gate {quality_s:.1f} s)")

        with running_broker(root) as (bootstrap, _data, _pid):
            hand_s, consumed = run_hand_written(bootstrap, str(Path(tmp) / "hand-written"), args.partitions, total,
                                                args.chunk)
        assert consumed == total, (consumed, total)
        hand = total / hand_s
        print(f"hand-written (confluent-kafka -> pyarrow -> write_deltalake): {hand_s:.1f} s, {hand:,.0f} records/s")
        print(json.dumps({"bench": "ingest", "records": total, "codec": args.codec, "master": args.master,
                          "topiclake_records_per_s": round(ours), "topiclake_seconds": round(seconds, 2),
                          "quality_gate_driver_seconds": round(quality_s, 2),
                          "topiclake_first_run_records_per_s": round(ours_cold),
                          "topiclake_first_run_seconds": round(cold_s, 2),
                          "hand_written_records_per_s": round(hand), "hand_written_seconds": round(hand_s, 2),
                          "ratio_first_run": round(ours_cold / hand, 2), "ratio": round(ours / hand, 2)}))


# ------------------------------------------------------------------------------------- --values avro
# Typed tables: the same number of records, with 100-byte values in Confluent's wire format (an
# Avro record of eight fields) and the schema in `_schemas`, ingested into typed columns; the
# raw-bytes ingest of the raw benchmark's records runs in the same application. Both run twice
# (first and steady state); "ratio" is Avro steady-state records/s / raw steady-state records/s.

AVRO_TOPIC = "bench-avro"
AVRO_SCHEMA = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"},
    {"name": "event", "type": {"type": "enum", "name": "Kind", "symbols": ["click", "view", "purchase", "scroll"]}},
    {"name": "amount", "type": "double"},
    {"name": "session", "type": "string"},
    {"name": "user", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "flag", "type": "boolean"},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
AVRO_VALUE_BYTES = 100


def avro_template_batch(seed: int, codec: str, *, base_timestamp: int, spread_ms: int) -> bytes:
    """1000 records, 16-byte keys, values of exactly AVRO_VALUE_BYTES in the wire format (schema id 1)."""
    import io
    import random

    import fastavro

    from topiclake.segments.batch import Record, build_batch

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    rng = random.Random(seed)
    records = []
    for i in range(RECORDS_PER_BATCH):
        datum = {"id": rng.randrange(10**9), "event": rng.choice(["click", "view", "purchase", "scroll"]),
                 "amount": rng.randrange(10**7) / 100, "session": rng.randbytes(12).hex(),
                 "user": "user-%011d" % rng.randrange(10**11), "at": base_timestamp + rng.randrange(spread_ms),
                 "flag": rng.random() < 0.5, "note": ""}
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, datum)
        datum["note"] = "n" * (AVRO_VALUE_BYTES - 5 - len(out.getvalue()))  # one length byte either way
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, datum)
        value = b"\x00\x00\x00\x00\x01" + out.getvalue()
        assert len(value) == AVRO_VALUE_BYTES, len(value)
        key = b"user-%011d" % rng.randrange(10**11)
        records.append(Record(i, base_timestamp + rng.randrange(spread_ms), key, value))
    return build_batch(records, base_offset=0, compression=codec)


def write_avro_topic(root: Path, records: int, partitions: int, codec: str) -> int:
    """The `_schemas` topic (subject bench-avro-value, id 1) and the Avro topic, through the Log."""
    from topiclake.registry.records import SchemaValue, schema_record
    from topiclake.segments.batch import Record, build_batch

    layout = StorageLayout(root)
    config = LogConfig.from_properties({"segment.bytes": str(SEGMENT_BYTES)})
    key, value = schema_record(SchemaValue(f"{AVRO_TOPIC}-value", 1, 1, json.dumps(AVRO_SCHEMA))).encode()
    schemas = Log.open(layout.log_dir("_schemas", 0), config, topic="_schemas", partition=0)
    schemas.append(bytearray(build_batch([Record(0, 1_714_521_600_000, key, value)], base_offset=0)),
                   assign_offsets=True)
    schemas.close()
    TopicRegistry(layout).create(AVRO_TOPIC, partitions, {"segment.bytes": str(SEGMENT_BYTES)})
    templates = [avro_template_batch(seed, codec, base_timestamp=1_714_521_600_000, spread_ms=3_600_000)
                 for seed in range(TEMPLATES)]
    batches = records // RECORDS_PER_BATCH
    written = 0
    for p in range(partitions):
        log = Log.open(layout.log_dir(AVRO_TOPIC, p), config, topic=AVRO_TOPIC, partition=p)
        mine = [i for i in range(batches) if i % partitions == p]
        for start in range(0, len(mine), 64):
            log.append(bytearray(b"".join(templates[i % TEMPLATES] for i in mine[start:start + 64])),
                       assign_offsets=True)
            written += len(mine[start:start + 64]) * RECORDS_PER_BATCH
        log.close()
    return written


def avro_mode(args) -> None:
    from topiclake.lake.ingest import IngestOptions, ingest
    from topiclake.lake.spark import get_session

    with tempfile.TemporaryDirectory(prefix="topiclake-bench-ingest-avro-") as tmp:
        root = Path(tmp) / "data"
        t = time.perf_counter()
        total = write_topic(root, args.records, args.partitions, args.codec)
        assert write_avro_topic(root, args.records, args.partitions, args.codec) == total
        print(f"wrote {total} raw and {total} Avro records as segments in {time.perf_counter() - t:.1f} s")
        spark = get_session("bench-ingest-avro", master=args.master, conf={
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "1g"})
        spark.range(4).count()  # the JVM is up: its start-up is not counted
        runs = {}
        for name, topic in (("raw", TOPIC), ("avro", AVRO_TOPIC)):
            for run in ("first", "steady"):
                started = time.perf_counter()
                result = ingest(spark, IngestOptions(topics=(topic,), root=root, table=f"{name}-{run}",
                                                     bootstrap="none"))
                seconds = time.perf_counter() - started
                assert result.records == total, (name, result.records, total)
                runs[(name, run)] = seconds
                print(f"{name} ingest ({args.master}), {run} run: {seconds:.1f} s, {total / seconds:,.0f} records/s")
        typed = spark.read.parquet(str(root / "tables" / "avro-steady")).limit(1).collect()[0].asDict()
        assert typed["value_schema_id"] == 1 and typed["event"] in ("click", "view", "purchase", "scroll"), typed
        raw, avro = total / runs[("raw", "steady")], total / runs[("avro", "steady")]
        print(json.dumps({"bench": "ingest", "values": "avro", "records": total, "value_bytes": AVRO_VALUE_BYTES,
                          "codec": args.codec, "master": args.master,
                          "avro_records_per_s": round(avro), "avro_seconds": round(runs[("avro", "steady")], 2),
                          "raw_records_per_s": round(raw), "raw_seconds": round(runs[("raw", "steady")], 2),
                          "avro_first_run_records_per_s": round(total / runs[("avro", "first")]),
                          "raw_first_run_records_per_s": round(total / runs[("raw", "first")]),
                          "ratio": round(avro / raw, 2), "target": 0.5}))


if __name__ == "__main__":
    main()
