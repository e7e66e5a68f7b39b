"""spark-submit entry point: re-read offsets [from, to) of one topic partition and replace exactly
those rows of the table in one commit (idempotent; the group's offsets do not move).

    spark-submit jobs/backfill.py --table orders --topic orders --partition 0 --from 100 --to 200

`topiclake backfill` runs the same job with the same flags (topiclake.lake.jobs.flags); --help lists them.
Errors are one line on stderr (--debug adds the traceback); Spark's own log only with --verbose.
"""

import sys

from topiclake.lake.jobs.main import backfill_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
