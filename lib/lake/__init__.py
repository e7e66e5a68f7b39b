"""topiclake.lake: the Spark/Delta side. Kafka segment files -> Delta tables exactly once
(ingest), offset-range backfill, SQL over table snapshots, offset coverage. docs/LAKE.md has the
commands and the commit protocol; modules import Spark lazily where they can, so the planner and
the commit code are usable without a JVM."""
