"""Typed tables from the schema registry: plan.py (driver: subjects, recipes, columns), rows.py
(executors: wire format -> typed columns or quarantine), avro.py + _native/avro.c, recipes.py
(Protobuf via ptars, JSON via Arrow's reader), columns.py (merging versions), hooks.py (the seam
into ingest and backfill). docs/LAKE.md describes the behaviour."""
