"""Benchmark: a whole new `topiclake metrics` process (what a cron or a one-off check pays; a
`--listen` server pays the in-process part per scrape) over a root with a few ingested tables.

Builds the root once: TABLES topics of PARTITIONS partitions, BATCHES batches of 1000 records per
partition (bench/_data.py), ingested by one local Spark session, then a few more batches so that
every partition has lag. Then times `python -m topiclake.cli metrics --data ROOT` REPEAT times
and, in this process, `scrape.exposition(root)` alone (the per-scrape cost of --listen).

    python bench/metrics_scrape.py [--tables 3] [--partitions 2] [--batches 20] [--repeat 5]

The last line is one JSON object with every figure measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._data import template_batch  # noqa: E402
from topiclake.segments.batch import set_base_offset  # noqa: E402


def build_root(root: Path, tables: int, partitions: int, batches: int) -> None:
    from topiclake.lake.runs.ingest import IngestOptions, run
    from topiclake.segments.filenames import log_file
    from topiclake.segments.storage import StorageLayout, TopicRegistry

    layout = StorageLayout(root)
    template = template_batch(1, "lz4")
    topics = [f"events{n}" for n in range(tables)]
    next_offset = {}
    for topic in topics:
        TopicRegistry(layout).create(topic, partitions)
        for p in range(partitions):
            layout.log_dir(topic, p).mkdir(parents=True, exist_ok=True)
            next_offset[(topic, p)] = 0

    def append(count: int) -> None:
        for (topic, p), offset in next_offset.items():
            with open(log_file(layout.log_dir(topic, p), 0), "ab") as f:
                for _ in range(count):
                    batch = bytearray(template)
                    set_base_offset(batch, 0, offset)
                    f.write(batch)
                    offset += 1000
            next_offset[(topic, p)] = offset

    append(batches)
    run(IngestOptions(topics=tuple(topics), root=root, bootstrap="none"), master="local[2]")
    append(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        root = Path(tmp) / "data"
        build_root(root, args.tables, args.partitions, args.batches)
        command = [sys.executable, "-m", "topiclake.cli", "metrics", "--data", str(root)]
        process_s = []
        for _ in range(args.repeat):
            started = time.monotonic()
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            process_s.append(time.monotonic() - started)
        from topiclake.lake.metrics.scrape import exposition

        exposition(root)  # imports and first reads out of the figure
        scrape_s = []
        for _ in range(args.repeat):
            started = time.monotonic()
            exposition(root)
            scrape_s.append(time.monotonic() - started)
        lines = done.stdout.count("\n")
    figures = {"tables": args.tables, "partitions": args.tables * args.partitions,
               "records_per_partition": (args.batches + 2) * 1000, "output_lines": lines,
               "process_s_median": round(statistics.median(process_s), 3), "process_s_min": round(min(process_s), 3),
               "scrape_s_median": round(statistics.median(scrape_s), 4)}
    print(f"topiclake metrics, new process: median {figures['process_s_median']} s; in-process scrape: "
          f"{figures['scrape_s_median']} s ({figures['tables']} tables, {figures['partitions']} partitions)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
