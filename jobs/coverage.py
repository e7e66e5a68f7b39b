"""spark-submit entry point: offset coverage of a topic table, per partition: the offset ranges it
holds and the reason for every gap (control, aborted, compaction, retention, missing). Exits 3 when
some partition has `missing` offsets (records the log has and the table lacks).

    spark-submit jobs/coverage.py --table orders --topic orders [--partition 0] [--group G]

`topiclake coverage` runs the same job with the same flags (topiclake.lake.jobs.flags); --help lists them.
Errors are one line on stderr (--debug adds the traceback); Spark's own log only with --verbose.
"""

import sys

from topiclake.lake.jobs.main import coverage_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
