"""spark-submit entry point: Kafka log compaction of compacted topics (key map and rewrite on
executors, crash-safe swap on the driver). Exits 1 when a partition failed.

    spark-submit jobs/compact.py [--topic T ...] [--data DIR|s3://bucket/prefix] [--force] [--target-task-bytes N]
        [--now-ms MS]

`topiclake compact` runs the same job; --help lists the flags.
Errors are one line on stderr (--debug adds the traceback); Spark's own log only with --verbose.
"""

import sys

from topiclake.lake.jobs.main import compact_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
