"""Log.append throughput against plain os.write of the same bytes, measured in the same run.

Both sides write the same pre-built 16 KiB batches (no fsync: page-cache throughput, which is
what the broker's append path costs). Prints MB/s for both and, as the last line, one JSON
object with the figures and "ratio" = log / os.write (target >= 0.5).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from topiclake.segments.batch import Record, build_batch
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log


def make_batches(count: int, batch_bytes: int) -> list[bytes]:
    value = b"x" * 100
    per_batch = max(1, batch_bytes // 120)
    records = [Record(i, 1_700_000_000_000 + i, b"key-%08d" % i, value) for i in range(per_batch)]
    batch = build_batch(records, base_offset=0)
    return [batch] * count


def bench_log(directory: Path, batches: list[bytes]) -> float:
    log = Log.open(directory / "bench-0", LogConfig())
    start = time.perf_counter()
    for batch in batches:
        log.append(batch)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def bench_write(directory: Path, batches: list[bytes]) -> float:
    fd = os.open(directory / "plain.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for batch in batches:
        os.write(fd, batch)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    batches = make_batches(args.batches, args.batch_bytes)
    total = sum(len(b) for b in batches)
    best_log = best_write = float("inf")
    for _ in range(args.rounds):  # interleaved rounds, best of each: less noise from neighbours
        with tempfile.TemporaryDirectory() as tmp:
            best_write = min(best_write, bench_write(Path(tmp), batches))
        with tempfile.TemporaryDirectory() as tmp:
            best_log = min(best_log, bench_log(Path(tmp), batches))
    log_mbs = total / best_log / 1e6
    write_mbs = total / best_write / 1e6
    print(f"os.write:   {write_mbs:8.1f} MB/s")
    print(f"Log.append: {log_mbs:8.1f} MB/s  ({total / 1e6:.0f} MB in {args.batches} batches of "
          f"{len(batches[0])} bytes)")
    print(json.dumps({"bytes": total, "batches": args.batches, "batch_bytes": len(batches[0]),
                      "log_append_mb_s": round(log_mbs, 1), "os_write_mb_s": round(write_mbs, 1),
                      "ratio": round(log_mbs / write_mbs, 3)}))


if __name__ == "__main__":
    main()
