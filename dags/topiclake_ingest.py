"""Ingest DAG: spark-submit jobs/ingest.py, one task per `[[ingest]]` pipeline in
conf/topiclake.toml; without pipelines, one task driven by the run's params (topics, table, group).

Every run's params: `data` (storage root), `bootstrap` (broker to mirror offsets to; empty:
the brokers registered in the storage root; `none`: off). Exactly once holds whatever Airflow
does (retries, overlapping runs): the offsets live in the Delta commit itself.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pendulum
from airflow.sdk import DAG, Param

from topiclake_common import AIRFLOW, HOME, data_docs, pipelines, storage_root, submit

ROOT_ARGS = ["--data", "{{ params.data }}", "--bootstrap", "{{ params.bootstrap }}",
             "--schemas", str(HOME / "conf" / "schemas"), "--expectations", str(HOME / "conf" / "expectations")]

with DAG(
    dag_id="topiclake_ingest",
    description="Kafka segment files -> Delta tables, exactly once (jobs/ingest.py)",
    schedule=AIRFLOW.get("ingest_schedule", "@hourly"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # a second run would only lose the commit race (ConcurrentWriterError)
    tags=["topiclake"],
    params={
        "data": Param(storage_root(), type="string", description="storage root"),
        "bootstrap": Param(AIRFLOW.get("bootstrap", ""), type="string",
                           description="broker host:port for the offsets mirror; empty: registered brokers; none: off"),
        "topics": Param("", type="string", description="topics (a,b) when no [[ingest]] pipeline is configured"),
        "table": Param("", type="string", description="table name/path (default: one table per topic)"),
        "group": Param("", type="string", description="consumer group (default topiclake-ingest-<table>)"),
    },
) as dag:
    configured = pipelines()
    ingests = []
    for p in configured:
        args = ["--topic", ",".join(p["topics"]), "--group", p["group"]]
        args += ["--table", p["table"]] if p.get("table") else []
        ingests.append(submit(p["task_id"], "ingest", args + ROOT_ARGS))
    if not configured:
        ingests.append(submit("ingest", "ingest", ["--topic", "{{ params.topics }}", "--table", "{{ params.table }}",
                                                   "--group", "{{ params.group }}"] + ROOT_ARGS))
    ingests >> data_docs()
