"""spark-submit entry point: segment retention (retention.ms / retention.bytes, whole segments,
oldest first, never past the high watermark) and the tables' maintenance.

    spark-submit jobs/retention.py [--topic T ...] [--data DIR] [--config FILE]
        [--protect-groups G1,G2] [--now-ms MS] [--dry-run]
        [--table NAME ...] [--table-retention-days N] [--optimize] [--target-file-bytes N]
        [--vacuum-hours H]

--protect-groups holds back segments that those groups (Delta txn versions in the tables, else
broker-committed offsets in __consumer_offsets) have not committed past. Table maintenance runs
only when one of --table-retention-days, --optimize, --vacuum-hours is given (on the --table
tables, default every table under <root>/tables). Exits 1 when a partition or table failed.
No Spark session is needed: everything here is metadata and file renames.
"""

from __future__ import annotations

import argparse
import logging
import sys

from topiclake.lake.retention import format_summary, options_from_args, retain
from topiclake.segments.errors import TopiclakeError


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="retention.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--topic", action="append", default=[], help="topic (repeatable, or a,b,c; default: all)")
    p.add_argument("--data", help="storage root (default: $TOPICLAKE_ROOT, conf/topiclake.toml, ./data)")
    p.add_argument("--config", help="settings file (default: conf/topiclake.toml)")
    p.add_argument("--protect-groups", action="append", default=[],
                   help="consumer groups whose uncommitted offsets must not be deleted (G1,G2)")
    p.add_argument("--now-ms", type=int, help="retention clock in epoch ms (default: now)")
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, change nothing")
    p.add_argument("--table", action="append", default=[], help="table for table maintenance (default: all)")
    p.add_argument("--table-retention-days", type=int, help="remove table rows whose record_date is older")
    p.add_argument("--optimize", action="store_true", help="compact small files of the tables")
    p.add_argument("--target-file-bytes", type=int, help="optimize's target file size")
    p.add_argument("--vacuum-hours", type=int, help="vacuum unreferenced files older than this")
    p.add_argument("--master", help="accepted for symmetry with the other jobs; unused")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = retain(options_from_args(parse_args(argv)))
    except TopiclakeError as exc:  # a bad argument (unknown topic, bad config): say it, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(result))
    return 1 if result.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
