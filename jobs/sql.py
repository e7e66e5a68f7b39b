"""spark-submit entry point: Spark SQL over the topic tables (each a view of its current snapshot):
several statements, a file, or an interactive shell on a terminal.

    spark-submit jobs/sql.py "SELECT topic, count(*) FROM orders GROUP BY topic" [--format table|csv|json] [-f FILE]

`topiclake sql` runs the same job with the same flags (topiclake.lake.jobs.flags); --help lists them.
Errors are one line on stderr (--debug adds the traceback); Spark's own log only with --verbose.
"""

import sys

from topiclake.lake.jobs.main import sql_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
