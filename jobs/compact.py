"""spark-submit entry point: Kafka log compaction of compacted topics (key map and rewrite on
executors, crash-safe swap on the driver).

    spark-submit jobs/compact.py [--topic T ...] [--data DIR] [--config FILE] [--force]
        [--target-task-bytes N] [--now-ms MS] [--master M]

Without --topic: every topic whose cleanup.policy includes compact (`__consumer_offsets` too).
Exits 1 when a partition failed (the others are still compacted).
"""

from __future__ import annotations

import argparse
import logging
import sys

from topiclake.lake.compaction import DEFAULT_TARGET_TASK_BYTES, CompactOptions, format_summary, run
from topiclake.segments.settings import load_settings, storage_root


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="compact.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--topic", action="append", default=[], help="topic to compact (repeatable, or a,b,c; "
                   "default: every compacted topic)")
    p.add_argument("--data", help="storage root (default: $TOPICLAKE_ROOT, conf/topiclake.toml, ./data)")
    p.add_argument("--config", help="settings file (default: conf/topiclake.toml)")
    p.add_argument("--force", action="store_true",
                   help="clean every partition with a cleanable range, whatever min.cleanable.dirty.ratio says")
    p.add_argument("--target-task-bytes", type=int, default=DEFAULT_TARGET_TASK_BYTES,
                   help="bytes of dirty segments per key-map task")
    p.add_argument("--now-ms", type=int, help="the cleaner's clock in epoch ms (default: now)")
    p.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    options = CompactOptions(root=storage_root(load_settings(args.config), args.data),
                             topics=tuple(t for arg in args.topic for t in arg.split(",") if t),
                             force=args.force, target_task_bytes=args.target_task_bytes, now_ms=args.now_ms)
    result = run(options, master=args.master)
    print(format_summary(result))
    return 1 if result.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
