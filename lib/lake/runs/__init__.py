"""The lake jobs' work: ingest, backfill, rebuild, coverage, compaction, retention and the tables' maintenance."""
