"""spark-submit entry point: Kafka segment files -> Delta tables, exactly once.

    spark-submit jobs/ingest.py --topic orders [--topic payments] [--table NAME|PATH|URI] [--group G] [--data DIR] ...
    spark-submit jobs/ingest.py --topic users --kind upsert [--format raw|debezium]   # one row per key

`topiclake ingest` runs the same job with the same flags (topiclake.lake.jobs.flags); --help lists them.
Errors are one line on stderr (--debug adds the traceback); Spark's own log only with --verbose.
"""

import sys

from topiclake.lake.jobs.main import ingest_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
