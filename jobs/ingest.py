"""spark-submit entry point: Kafka segment files -> Delta tables, exactly once.

    spark-submit jobs/ingest.py --topic orders [--topic payments] [--table NAME|PATH|URI]
        [--group G] [--data DIR] [--starting-offsets earliest|latest|JSON|ISO-time]
        [--ending-offsets latest|JSON] [--target-task-bytes N] [--partition-by record_date|none]
        [--allow-data-loss] [--schemas conf/schemas] [--expectations conf/expectations]
        [--bootstrap HOST:PORT|none]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from topiclake.lake.ingest import IngestOptions, format_summary, run
from topiclake.lake.plan import DEFAULT_TARGET_TASK_BYTES
from topiclake.segments.settings import load_settings, storage_root


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ingest.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--topic", action="append", required=True, help="topic to ingest (repeatable, or a,b,c)")
    p.add_argument("--table", help="table name under <root>/tables, or a path/URI (default: one table per topic)")
    p.add_argument("--group", help="consumer group id (default: topiclake-ingest-<table>)")
    p.add_argument("--data", help="storage root (default: $TOPICLAKE_ROOT, conf/topiclake.toml, ./data)")
    p.add_argument("--config", help="settings file (default: conf/topiclake.toml)")
    p.add_argument("--starting-offsets", help="where a new group starts: earliest (default), latest, JSON, ISO time")
    p.add_argument("--ending-offsets", help="where the run stops: latest (default, the last stable offset) or JSON")
    p.add_argument("--target-task-bytes", type=int, default=DEFAULT_TARGET_TASK_BYTES)
    p.add_argument("--partition-by", default="record_date", help="partition column of new tables, or 'none'")
    p.add_argument("--allow-data-loss", action="store_true",
                   help="record offsets deleted by retention before ingestion as a gap instead of failing")
    p.add_argument("--schemas", default="conf/schemas",
                   help="directory of <table>.json value schemas (typed columns; default conf/schemas)")
    p.add_argument("--expectations", default="conf/expectations",
                   help="directory of <table>.json great-expectations suites (default conf/expectations; "
                        "a table without one gets the default suite)")
    p.add_argument("--bootstrap", help="broker to mirror the group's offsets to (host:port); default: the brokers "
                                       "registered under <root>/cluster/brokers; 'none' turns mirroring off")
    p.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    # An empty value means "not given" (templated callers such as the Airflow DAGs pass every flag).
    args.table, args.group, args.data, args.bootstrap = (v or None for v in (args.table, args.group, args.data,
                                                                            args.bootstrap))
    topics = tuple(t for arg in args.topic for t in arg.split(",") if t)
    if not topics:
        raise SystemExit("ingest.py: no topic given (--topic)")
    options = IngestOptions(
        topics=topics, root=storage_root(load_settings(args.config), args.data),
        table=args.table, group=args.group, starting_offsets=args.starting_offsets,
        ending_offsets=args.ending_offsets, target_task_bytes=args.target_task_bytes,
        partition_by=() if args.partition_by == "none" else tuple(args.partition_by.split(",")),
        allow_data_loss=args.allow_data_loss, schemas_dir=Path(args.schemas),
        expectations_dir=Path(args.expectations), bootstrap=args.bootstrap)
    print(format_summary(run(options, master=args.master)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
