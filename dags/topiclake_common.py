"""Shared wiring of the topiclake DAGs: where the project and its jobs are, what
conf/topiclake.toml configures, and one SparkSubmitOperator factory.

Deliberately free of topiclake imports (stdlib only): the scheduler parses DAG files, and it may
run where the topiclake package is not installed; the jobs import it under spark-submit.

Settings (all optional):
- $TOPICLAKE_HOME: the project checkout holding jobs/ and conf/ (default: this file's parent's parent).
- $TOPICLAKE_CONFIG: the settings file (default: <home>/conf/topiclake.toml), with
  `[storage] root` (a relative root is relative to <home>: Airflow runs tasks in no fixed
  directory), `[airflow]` (spark_conn_id, py_files, jars, spark_conf, ingest_schedule,
  maintenance_schedule, bootstrap, protect_groups, python) and `[[ingest]]` pipelines (topics,
  table, group).
- $TOPICLAKE_ROOT wins over `[storage] root`, as for every topiclake command.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tomllib
from pathlib import Path

HOME = Path(os.environ.get("TOPICLAKE_HOME", Path(__file__).resolve().parents[1]))
CONFIG = Path(os.environ.get("TOPICLAKE_CONFIG", HOME / "conf" / "topiclake.toml"))


def settings() -> dict:
    try:
        with open(CONFIG, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}


SETTINGS = settings()
AIRFLOW = SETTINGS.get("airflow", {})


def storage_root() -> str:
    """$TOPICLAKE_ROOT, else `[storage] root`: a URL (s3://bucket/prefix) passes unchanged, a
    relative directory is made absolute under <home>."""
    if os.environ.get("TOPICLAKE_ROOT"):
        return os.environ["TOPICLAKE_ROOT"]
    root = SETTINGS.get("storage", {}).get("root", "data")
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", root):
        return root
    return str((HOME / root).resolve())


def pipelines() -> list[dict]:
    """The configured `[[ingest]]` pipelines, each with a task id."""
    out = []
    for entry in SETTINGS.get("ingest", []):
        topics = entry["topics"] if isinstance(entry["topics"], list) else [entry["topics"]]
        name = entry.get("table") or topics[0]
        out.append({**entry, "topics": topics, "task_id": "ingest_" + re.sub(r"[^A-Za-z0-9_]", "_", name),
                    "group": entry.get("group") or f"topiclake-ingest-{Path(name).name}"})
    return out


# Delta in every job's session (as topiclake.lake.spark.jars sets it; the DAGs import no topiclake
# code): its SQL extension and catalog, and its jars by --jars for a cluster's executors (the venv's
# spark-submit already has them on the driver's class path). `[airflow] jars` names other jars;
# unset: the ones bin/_env.sh installed into this Python's venv.
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def delta_jars() -> str | None:
    if AIRFLOW.get("jars"):
        return AIRFLOW["jars"]
    jars = sorted((Path(sys.prefix) / "share" / "topiclake" / "jars").glob("*.jar"))
    return ",".join(str(j) for j in jars) or None


def common_args() -> list[str]:
    """Flags every job takes: the settings file (absolute: the task's directory is arbitrary)."""
    return ["--config", str(CONFIG)] if CONFIG.is_file() else []


def submit(task_id: str, job: str, args: list[str], **kwargs):
    """spark-submit <home>/jobs/<job>.py with args; master and deploy mode come from the Spark
    connection (`[airflow] spark_conn_id`, default spark_default)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    py_files = AIRFLOW.get("py_files")  # the zip of `python -m topiclake.lake.spark.package`, for clusters
    return SparkSubmitOperator(
        task_id=task_id, application=str(HOME / "jobs" / f"{job}.py"), application_args=args + common_args(),
        conn_id=AIRFLOW.get("spark_conn_id", "spark_default"),
        py_files=str(HOME / py_files) if py_files else None, name=f"topiclake-{task_id}", jars=delta_jars(),
        conf={"spark.ui.showConsoleProgress": "false", **DELTA_CONF, **AIRFLOW.get("spark_conf", {})}, **kwargs)


def data_docs(task_id: str = "data_docs"):
    """Rebuild great-expectations' Data Docs site from the validation results the jobs stored
    (`topiclake data-docs`): a short Python task after the Spark ones, which leave it out for speed.
    It runs whatever their outcome, so a failed validation's page is there to read. The Python
    with topiclake installed: `[airflow] python` (default: the one parsing this DAG)."""
    from airflow.providers.standard.operators.bash import BashOperator

    python = AIRFLOW.get("python", sys.executable)
    command = " ".join([shlex.quote(python), "-m", "topiclake.cli", "data-docs", '--data "{{ params.data }}"',
                        *map(shlex.quote, common_args())])
    return BashOperator(task_id=task_id, bash_command=command, trigger_rule="all_done")
