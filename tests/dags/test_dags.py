"""The Airflow DAGs: they import cleanly (DagBag), wire SparkSubmitOperator to jobs/ with the
right flags, and the ingest DAG really runs: `dag.test()` with a temporary AIRFLOW_HOME, a
spark connection from the environment and spark-submit for real on a tiny topic.

Airflow reads its configuration when first imported, so each check runs in a fresh Python with
the environment set (never inside the pytest process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from topiclake.lake.metrics.run_metrics import pipeline_runs, textfile_path

from tests.support.lake import TopicWriter, read_table

pytest.importorskip("airflow.providers.apache.spark", reason="the airflow extra is not installed (bin/_env.sh)")

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"


def airflow_env(tmp_path: Path, config: str = "") -> dict[str, str]:
    home = tmp_path / "airflow"
    home.mkdir(exist_ok=True)
    settings = tmp_path / "topiclake.toml"
    settings.write_text(config)
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
           "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
           "TOPICLAKE_CONFIG": str(settings), "TOPICLAKE_HOME": str(REPO),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "")}
    env.pop("TOPICLAKE_ROOT", None)
    return env


def run_script(tmp_path: Path, env: dict, body: str, timeout: int = 300) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"  # a file, not python -c (STACK-NOTES: the pyspark doctest trap)
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


@pytest.mark.parametrize("configured, expected", [
    ('"s3://lake-bucket/root"', "s3://lake-bucket/root"),  # a URL passes through unchanged
    ('"data"', str(REPO / "data")),  # a directory: absolute, under the project's home
])
def test_the_storage_root_of_the_settings(tmp_path, configured, expected):
    env = airflow_env(tmp_path, f"[storage]\nroot = {configured}\n")
    result = run_script(tmp_path, env, f"""
        import sys
        sys.path.insert(0, {str(DAGS)!r})
        from topiclake_common import storage_root
        print(storage_root())
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == expected


def test_dagbag_imports_and_wiring(tmp_path):
    env = airflow_env(tmp_path, textwrap.dedent("""
        [airflow]
        spark_conn_id = "spark_local"
        protect_groups = ["audit"]
        [[ingest]]
        topics = ["orders", "payments"]
        table = "commerce"
        [[ingest]]
        topics = ["clicks"]
    """))
    result = run_script(tmp_path, env, f"""
        import json
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder={str(DAGS)!r})
        out = {{"errors": {{k: str(v) for k, v in bag.import_errors.items()}}, "dags": {{}}}}
        for dag_id, dag in bag.dags.items():
            out["dags"][dag_id] = {{t.task_id: {{"application": getattr(t, "application", None),
                                                "args": getattr(t, "application_args", None),
                                                "command": getattr(t, "bash_command", None),
                                                "conn": getattr(t, "_conn_id", None),
                                                "conf": getattr(t, "conf", None),
                                                "jars": getattr(t, "jars", None),
                                                "up": sorted(t.upstream_task_ids)}}
                                   for t in dag.tasks}}
            out["dags"][dag_id]["__params"] = sorted(dag.params.keys())
        print(json.dumps(out))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    dags = out["dags"]
    assert set(dags) == {"topiclake_ingest", "topiclake_backfill", "topiclake_maintenance"}

    ingest = dags["topiclake_ingest"]
    assert set(ingest) - {"__params"} == {"ingest_commerce", "ingest_clicks", "data_docs"}  # a task per pipeline
    assert ingest["data_docs"]["up"] == ["ingest_clicks", "ingest_commerce"]  # then the Data Docs site
    assert " -m topiclake.cli data-docs --data " in ingest["data_docs"]["command"]
    commerce = ingest["ingest_commerce"]
    assert commerce["application"] == str(REPO / "jobs" / "ingest.py") and commerce["conn"] == "spark_local"
    args = commerce["args"]
    assert args[args.index("--topic") + 1] == "orders,payments" and args[args.index("--table") + 1] == "commerce"
    assert args[args.index("--group") + 1] == "topiclake-ingest-commerce"
    assert args[args.index("--config") + 1] == env["TOPICLAKE_CONFIG"]
    # Delta in the job's session, its jars for a cluster's executors
    assert commerce["conf"]["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert commerce["conf"]["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert "delta-spark_" in commerce["jars"] and commerce["jars"].split(",")[0].endswith(".jar")

    backfill = dags["topiclake_backfill"]["backfill"]
    assert backfill["application"] == str(REPO / "jobs" / "backfill.py")
    assert {"--from", "--to", "--partition", "--table", "--topic"} <= set(backfill["args"])

    maintenance = dags["topiclake_maintenance"]
    assert maintenance["compact"]["application"] == str(REPO / "jobs" / "compact.py")
    assert maintenance["retention"]["application"] == str(REPO / "jobs" / "retention.py")
    assert maintenance["retention"]["up"] == ["compact"]
    assert "--protect-groups" in maintenance["retention"]["args"]
    assert "protect_groups" in maintenance["__params"]


def test_ingest_dag_runs_spark_submit_for_real(tmp_path):
    root = tmp_path / "data"
    w = TopicWriter(root, "tiny", partitions=2)
    w.produce(0, [b"a", b"b", b"c"])
    w.produce(1, [b"d"])
    env = airflow_env(tmp_path, '[airflow]\nspark_conn_id = "spark_local"\n')
    started = time.monotonic()
    result = run_script(tmp_path, env, f"""
        from airflow.dag_processing.dagbag import DagBag
        from airflow.utils.db import initdb

        initdb()
        dag = DagBag(dag_folder={str(DAGS)!r}).dags["topiclake_ingest"]
        run = dag.test(run_conf={{"topics": "tiny", "data": {str(root)!r}, "bootstrap": "none"}})
        print("STATE", run.state)
    """, timeout=400)
    elapsed = time.monotonic() - started
    assert result.returncode == 0 and "STATE success" in result.stdout, (result.stdout[-4000:], result.stderr[-4000:])
    table, data = read_table(root / "tables" / "tiny")
    assert sorted(zip(data["partition"].to_pylist(), data["offset"].to_pylist())) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert pc.count_distinct(data["value"]).as_py() == 4
    assert table.transaction_version("topiclake-ingest-tiny:tiny:0") == 3
    assert (root / "quality" / "index.html").is_file()
    # the spark-submitted job recorded its run for Prometheus (docs/PIPELINE-METRICS.md)
    run = pipeline_runs(root)
    assert [(r.operation, r.table, r.group, r.success, r.rows) for r in run] == [
        ("ingest", "tiny", "topiclake-ingest-tiny", True, 4)]
    assert textfile_path(root, "ingest", "tiny").is_file()
    print(f"dag.test() of topiclake_ingest: {elapsed:.0f} s")
    assert elapsed < 240
