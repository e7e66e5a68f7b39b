"""spark-submit entry point: rebuild a table from the log as another kind.

    spark-submit jobs/rebuild.py TABLE --kind append|upsert [--format raw|debezium] [--data DIR] ...

`topiclake rebuild` runs the same job with the same flags (topiclake.lake.jobs.flags); --help lists them.
"""

import sys

from topiclake.lake.jobs.main import rebuild_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
