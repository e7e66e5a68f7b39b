"""spark-submit entry point: a standing Spark SQL server (Spark Connect) over the topic tables.

    spark-submit jobs/sql_server.py [--host 127.0.0.1] [--port 15002] [--data ROOT]

`topiclake sql-server` runs the same job with the same flags; `topiclake sql` on the same root uses
it while it runs. It serves until SIGTERM or Ctrl-C.
"""

import sys

from topiclake.lake.jobs.main import sql_server_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
