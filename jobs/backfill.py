"""spark-submit entry point: re-read offsets [from, to) of one topic partition and replace exactly
those rows of the table in one commit (idempotent; the group's offsets do not move).

    spark-submit jobs/backfill.py --table orders --topic orders --partition 0 --from 100 --to 200
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from topiclake.lake.backfill import BackfillOptions, backfill, format_result
from topiclake.lake.plan import DEFAULT_TARGET_TASK_BYTES
from topiclake.lake.spark import get_session
from topiclake.segments.settings import load_settings, storage_root


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="backfill.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--table", required=True, help="table name under <root>/tables, or a path/URI")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--from", dest="from_offset", type=int, required=True, help="first offset (inclusive)")
    p.add_argument("--to", dest="to_offset", type=int, required=True, help="end offset (exclusive)")
    p.add_argument("--group", help="the ingest group whose offsets bound the range (default topiclake-ingest-<table>)")
    p.add_argument("--target-task-bytes", type=int, default=DEFAULT_TARGET_TASK_BYTES)
    p.add_argument("--expectations", default="conf/expectations",
                   help="directory of <table>.json great-expectations suites (default conf/expectations)")
    p.add_argument("--data", help="storage root")
    p.add_argument("--config", help="settings file (default conf/topiclake.toml)")
    p.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    args = p.parse_args(argv)
    args.group, args.data = args.group or None, args.data or None  # empty: not given (templated callers)
    options = BackfillOptions(root=storage_root(load_settings(args.config), args.data), table=args.table,
                              topic=args.topic, partition=args.partition, from_offset=args.from_offset,
                              to_offset=args.to_offset, group=args.group, target_task_bytes=args.target_task_bytes,
                              expectations_dir=Path(args.expectations))
    print(format_result(backfill(get_session("topiclake-backfill", master=args.master), options)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
