"""Backfill DAG (manual trigger): spark-submit jobs/backfill.py for one topic partition's offsets
[from, to) of one table; idempotent, so re-triggering it is safe."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pendulum
from airflow.sdk import DAG, Param

from topiclake_common import HOME, storage_root, submit

with DAG(
    dag_id="topiclake_backfill",
    description="Replace offsets [from, to) of one topic partition in a table (jobs/backfill.py)",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["topiclake"],
    params={
        "table": Param(type="string", description="table name under <root>/tables, or a path/URI"),
        "topic": Param(type="string"),
        "partition": Param(type="integer", minimum=0),
        "from_offset": Param(type="integer", minimum=0, description="first offset (inclusive)"),
        "to_offset": Param(type="integer", minimum=0, description="end offset (exclusive)"),
        "group": Param("", type="string",
                       description="ingest group bounding the range (default topiclake-ingest-<table>)"),
        "data": Param(storage_root(), type="string", description="storage root"),
    },
) as dag:
    submit("backfill", "backfill", [
        "--table", "{{ params.table }}", "--topic", "{{ params.topic }}", "--partition", "{{ params.partition }}",
        "--from", "{{ params.from_offset }}", "--to", "{{ params.to_offset }}", "--group", "{{ params.group }}",
        "--data", "{{ params.data }}", "--expectations", str(HOME / "conf" / "expectations")])
