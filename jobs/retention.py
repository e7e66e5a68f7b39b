"""spark-submit entry point: segment retention (retention.ms / retention.bytes, whole segments,
oldest first, never past the high watermark; no Spark session) and the tables' maintenance
(delta-spark: DELETE of old dates, OPTIMIZE, VACUUM, as Spark jobs on the job's master).
--protect-groups holds back segments those groups have not committed past; table maintenance runs
only when one of --table-retention-days, --optimize, --vacuum-hours is given. Exits 1 when a
partition or table failed.

    spark-submit jobs/retention.py [--topic T ...] [--protect-groups G1,G2] [--dry-run] \
        [--table NAME ...] [--optimize] ...

`topiclake retain` runs the same job; --help lists the flags.
Errors are one line on stderr (--debug adds the traceback); Spark's own log only with --verbose.
"""

import sys

from topiclake.lake.jobs.main import retention_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
