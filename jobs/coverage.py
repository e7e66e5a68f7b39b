"""spark-submit entry point: offset coverage of a topic table, per partition: the offset ranges it
holds and the reason for every gap (control, aborted, compaction, retention, missing).

    spark-submit jobs/coverage.py --table orders --topic orders [--partition 0] [--group G]

Exits 3 when some partition has `missing` offsets (records the log has and the table lacks).
"""

from __future__ import annotations

import argparse
import sys

from topiclake.lake.coverage import coverage, format_coverage
from topiclake.lake.ingest import GROUP_PREFIX
from topiclake.lake.source import topic_partitions
from topiclake.lake.spark import get_session
from topiclake.segments.settings import load_settings, storage_root
from topiclake.segments.storage import StorageLayout


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="coverage.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--table", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, action="append", help="partition (repeatable; default all)")
    p.add_argument("--group", help="ingest group (default topiclake-ingest-<table>)")
    p.add_argument("--data", help="storage root")
    p.add_argument("--config", help="settings file (default conf/topiclake.toml)")
    p.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    args = p.parse_args(argv)
    root = storage_root(load_settings(args.config), args.data)
    partitions = args.partition or topic_partitions(StorageLayout(root), args.topic)
    group = args.group or GROUP_PREFIX + args.table.rstrip("/").rsplit("/", 1)[-1]
    report = coverage(get_session("topiclake-coverage", master=args.master), root, args.table, args.topic,
                      partitions, group=group)
    print(format_coverage(report))
    return 3 if any(c.missing for c in report) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
