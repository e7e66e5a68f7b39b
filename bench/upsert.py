"""Benchmark: upsert ingest against append ingest of the same records, in one running application.

The records: 3 M changes over 300 k keys (16-byte keys, 100-byte values, 5% tombstones), each key
always in the same partition (as Kafka's partitioner puts it), written once as real segment files
through the segment Log. In one Spark application (local[2], warmed up by a small ingest):

1. append ingest of every record into a new append table;
2. upsert ingest of the same records into a new upsert table (stage, then merge into 16 buckets);
   "ratio" = upsert records/s over append records/s (target >= 0.40);
3. 300 k more changes (the same keys) appended to the log, and the upsert ingest of them into the
   300 k-key table: the steady state of a table kept up to date ("increment_s").

The table is checked against the latest value per key computed from the records written.

    python bench/upsert.py                      # 3 M changes over 300 k keys
    python bench/upsert.py --records 600000 --keys 60000

The last line is one JSON object with every figure measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import RECORDS_PER_BATCH
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log
from topiclake.segments.storage import StorageLayout, TopicRegistry

TOPIC = "bench-upsert"
PARTITIONS = 2
SEGMENT_BYTES = 64 * 1024 * 1024
TOMBSTONE_SHARE = 0.05
BASE_TS = 1_714_521_600_000


def key_of(k: int) -> bytes:
    return b"acct-%011d" % k


def change_batches(keys: int, seed: int, partition: int) -> list[tuple[bytes, dict[bytes, bytes | None]]]:
    """One round of changes of the partition's keys (k % PARTITIONS == partition), in batches of
    1000: (batch bytes, its last value per key)."""
    rng = random.Random(seed * 1000 + partition)
    mine = [k for k in range(partition, keys, PARTITIONS)]
    rng.shuffle(mine)
    out = []
    for start in range(0, len(mine), RECORDS_PER_BATCH):
        records, latest = [], {}
        for i, k in enumerate(mine[start:start + RECORDS_PER_BATCH]):
            value = None if rng.random() < TOMBSTONE_SHARE else (
                b'{"balance":%d.%02d,"round":%d,"note":"%s"' % (rng.randrange(10**7), rng.randrange(100), seed,
                                                               rng.randbytes(16).hex().encode())).ljust(99) + b"}"
            records.append(Record(i, BASE_TS + seed * 1000 + i, key_of(k), value))
            latest[key_of(k)] = value
        out.append((build_batch(records, base_offset=0), latest))
    return out


def write_rounds(root: Path, keys: int, rounds: range, expected: dict) -> int:
    """Append `rounds` rounds of changes of every key (even rounds one set of values, odd rounds
    another: consecutive rounds change every value); `expected` follows the latest value per key."""
    layout = StorageLayout(root)
    if not TopicRegistry(layout).exists(TOPIC):
        TopicRegistry(layout).create(TOPIC, PARTITIONS, {"segment.bytes": str(SEGMENT_BYTES),
                                                         "cleanup.policy": "compact"})
    config = LogConfig.from_properties({"segment.bytes": str(SEGMENT_BYTES)})
    written = 0
    for p in range(PARTITIONS):
        log = Log.open(layout.log_dir(TOPIC, p), config, topic=TOPIC, partition=p)
        for r in rounds:
            batches = _round_values(keys, r % 2, p)
            for start in range(0, len(batches), 64):
                chunk = batches[start:start + 64]
                log.append(bytearray(b"".join(b for b, _ in chunk)), assign_offsets=True)
                for _b, latest in chunk:
                    expected.update(latest)
                    written += len(latest)
        log.close()
    return written


_ROUNDS: dict[tuple[int, int, int], list] = {}


def _round_values(keys: int, seed: int, partition: int) -> list:
    if (keys, seed, partition) not in _ROUNDS:
        _ROUNDS[(keys, seed, partition)] = change_batches(keys, seed, partition)
    return _ROUNDS[(keys, seed, partition)]


def table_matches(uri: str, expected: dict[bytes, bytes | None]) -> bool:
    from deltalake import DeltaTable
    import pyarrow.fs as pafs

    data = DeltaTable(uri).to_pyarrow_table(columns=["key", "value"],
                                            filesystem=pafs.SubTreeFileSystem(uri, pafs.LocalFileSystem()))
    want = {k: v for k, v in expected.items() if v is not None}
    keys = data.column("key").to_pylist()
    return len(keys) == len(set(keys)) == len(want) and dict(zip(keys, data.column("value").to_pylist())) == want


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--keys", type=int, default=300_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a new temporary one)")
    args = parser.parse_args()
    rounds = max(1, args.records // args.keys)

    from topiclake.lake.runs.ingest import IngestOptions, ingest
    from topiclake.lake.spark.session import get_session

    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-upsert-"))
    root = work / "data"
    expected: dict[bytes, bytes | None] = {}
    started = time.perf_counter()
    written = write_rounds(root, args.keys, range(rounds), expected)
    print(f"wrote {written} changes over {args.keys} keys in {time.perf_counter() - started:.1f} s", flush=True)

    spark = get_session("bench-upsert", master=args.master, conf={"spark.ui.showConsoleProgress": "false"})
    warm = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, table="warm-up", bootstrap="none", kind="append",
                                       ending_offsets=json.dumps({TOPIC: {str(p): 2000 for p in range(PARTITIONS)}})))
    assert warm.records > 0

    def timed(table: str, kind: str):
        t0 = time.perf_counter()
        result = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, table=table, bootstrap="none", kind=kind))
        return time.perf_counter() - t0, result

    append_s, append_result = timed("appended", "append")
    print(f"append ingest: {append_result.records} records in {append_s:.1f} s", flush=True)
    upsert_s, upsert_result = timed("latest", "upsert")
    upsert_uri = str(root / "tables" / "latest")
    ok_full = table_matches(upsert_uri, expected)
    print(f"upsert ingest: {written} changes -> {upsert_s:.1f} s (table matches the latest values: {ok_full})",
          flush=True)

    increment = write_rounds(root, args.keys, range(rounds, rounds + 1), expected)
    increment_s, _ = timed("latest", "upsert")
    ok_increment = table_matches(upsert_uri, expected)
    print(f"upsert increment: {increment} changes into the {args.keys}-key table in {increment_s:.1f} s "
          f"(matches: {ok_increment})", flush=True)
    figures = {
        "changes": written, "keys": args.keys, "tombstone_share": TOMBSTONE_SHARE, "master": args.master,
        "append_s": round(append_s, 2), "append_records_per_s": round(written / append_s),
        "upsert_s": round(upsert_s, 2), "upsert_changes_per_s": round(written / upsert_s),
        "ratio": round(append_s / upsert_s, 3), "target_ratio": 0.40,
        "increment_changes": increment, "increment_s": round(increment_s, 2),
        "increment_changes_per_s": round(increment / increment_s),
        "table_matches": ok_full and ok_increment,
    }
    spark.stop()
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
