"""Ingest on real Spark clusters (separate executor JVMs and Python workers), via spark-submit:
`local-cluster[2,1,1024]`, and a standalone master + worker on loopback (STACK-NOTES.md), where
the table's OPTIMIZE then runs on the executors too. Delta's jars reach the cluster by --jars.

The executors run a Python that does NOT have topiclake installed (a venv that sees the project's
third-party packages but not its editable install): the package reaches them only through the
--py-files zip that `python -m topiclake.lake.spark.package` builds, as on a real cluster.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from topiclake.lake.spark.package import build_pyfiles

from tests.support.lake import TopicWriter, read_table

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(__import__("pyspark").__file__).parent
SITE_PACKAGES = next(p for p in sys.path if p.endswith("site-packages"))


@pytest.fixture(scope="module")
def cluster_env(tmp_path_factory):
    """(py-files zip, executor python, environment for spark-submit)."""
    work = tmp_path_factory.mktemp("cluster")
    zip_path = build_pyfiles(work / "dist")
    venv = work / "exec-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*")) / "site-packages"
    (site / "project-deps.pth").write_text(SITE_PACKAGES + "\n")  # a path, not a site dir: no editable finder
    executor_python = str(venv / "bin" / "python")
    probe = subprocess.run([executor_python, "-c", "import pyarrow, pandas; import topiclake"], capture_output=True)
    assert b"No module named 'topiclake'" in probe.stderr, "the executor python must not see topiclake"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": executor_python,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_HOME": str(SPARK_HOME)}
    return zip_path, executor_python, env


def make_topic(root: Path) -> None:
    w = TopicWriter(root, "clicks", partitions=2)
    for p in range(2):
        for i in range(3):
            w.produce(p, [f"p{p}-b{i}-r{j}".encode() for j in range(10)])
    w.produce(0, [b"t"], producer_id=7, transactional=True)
    w.end_txn(0, 7, commit=False)  # aborted: must not reach the table


def delta_jars() -> str:
    """What the README says to pass to a cluster's spark-submit: --jars "$(python -m topiclake.lake.spark.jars --jars)"."""
    return subprocess.run([sys.executable, "-m", "topiclake.lake.spark.jars", "--jars"], capture_output=True,
                          text=True, check=True).stdout.strip()


def submit(master: str, root: Path, cluster_env, timeout: int = 480, job: str = "ingest.py",
           args: tuple[str, ...] = ("--topic", "clicks", "--target-task-bytes", "400")) -> subprocess.CompletedProcess:
    """The plain spark-submit of pyspark (not the venv's wrapper): Delta's jars reach the driver and
    the executors by --jars, the package by --py-files."""
    zip_path, executor_python, env = cluster_env
    cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, "--py-files", str(zip_path),
           "--jars", delta_jars(),
           "--conf", "spark.ui.enabled=false", "--conf", f"spark.pyspark.python={executor_python}",
           "--conf", "spark.executor.memory=1g",
           str(REPO / "jobs" / job), "--data", str(root), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def check_table(root: Path) -> None:
    table, data = read_table(root / "tables" / "clicks")
    assert data.num_rows == 60 and pc.count_distinct(data["value"]).as_py() == 60
    for p in range(2):
        assert sorted(data.filter(pc.equal(data["partition"], p))["offset"].to_pylist()) == list(range(30))
    assert table.transaction_version("topiclake-ingest-clicks:clicks:0") == 32
    assert table.transaction_version("topiclake-ingest-clicks:clicks:1") == 30


def test_ingest_on_local_cluster(tmp_path, cluster_env):
    make_topic(tmp_path)
    result = submit("local-cluster[2,1,1024]", tmp_path, cluster_env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "60 records" in result.stdout
    check_table(tmp_path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ingest_on_standalone_master_and_worker(tmp_path, cluster_env):
    make_topic(tmp_path)
    _zip, _python, env = cluster_env
    port = _free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    logs = tmp_path / "logs"
    logs.mkdir()
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(_free_port())],
                              env=env, stdout=open(logs / "master.out", "w"), stderr=subprocess.STDOUT)
    worker = None
    try:
        _wait_for_port(port)
        worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                                   "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
                                   "--webui-port", str(_free_port()), "--work-dir", str(tmp_path / "work")],
                                  env=env, stdout=open(logs / "worker.out", "w"), stderr=subprocess.STDOUT)
        result = submit(f"spark://127.0.0.1:{port}", tmp_path, cluster_env)
        assert result.returncode == 0, result.stderr[-4000:]
        check_table(tmp_path)
        # the table's maintenance on the same cluster: OPTIMIZE's rewrite runs in the executors,
        # which have Delta's classes only through --jars
        result = submit(f"spark://127.0.0.1:{port}", tmp_path, cluster_env, job="retention.py",
                        args=("--table", "clicks", "--optimize"))
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
        assert "optimize: " in result.stdout and " -> 1" in result.stdout, result.stdout
        check_table(tmp_path)
        assert read_table(tmp_path / "tables" / "clicks")[0].history(1)[0]["operation"] == "OPTIMIZE"
    finally:
        for proc in (worker, master):  # spark-class execs java: these pids are the JVMs
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _wait_for_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"Spark master did not listen on 127.0.0.1:{port} within {timeout} s")
