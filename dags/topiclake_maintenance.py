"""Maintenance DAG: log compaction (jobs/compact.py), then retention (jobs/retention.py), which
holds back segments that the ingest groups have not read yet (`--protect-groups`: the configured
pipelines' groups plus `[airflow] protect_groups`), so retention never deletes un-ingested data."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pendulum
from airflow.sdk import DAG, Param

from topiclake_common import AIRFLOW, pipelines, storage_root, submit

PROTECTED = [p["group"] for p in pipelines()] + list(AIRFLOW.get("protect_groups", []))

with DAG(
    dag_id="topiclake_maintenance",
    description="Kafka log compaction and retention as Spark jobs (jobs/compact.py, jobs/retention.py)",
    schedule=AIRFLOW.get("maintenance_schedule", "@daily"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["topiclake"],
    params={
        "data": Param(storage_root(), type="string", description="storage root"),
        "topics": Param("", type="string", description="topics (a,b); empty: all"),
        "protect_groups": Param(",".join(PROTECTED), type="string",
                                description="groups whose un-ingested offsets retention must keep (G1,G2)"),
    },
) as dag:
    topics = ["--topic", "{{ params.topics }}", "--data", "{{ params.data }}"]
    compact = submit("compact", "compact", topics)
    retention = submit("retention", "retention", topics + ["--protect-groups", "{{ params.protect_groups }}"])
    compact >> retention
