"""Where pyspark is imported from under spark-submit, and when Spark's Python worker daemon can be
topiclake's (topiclake.lake.spark.python_workers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyspark

from topiclake.lake.spark import python_workers

SITE = Path(pyspark.__file__).resolve().parents[1]
LIB = SITE / "pyspark" / "python" / "lib"


def test_the_installed_pyspark_wins_over_its_own_zips(tmp_path, monkeypatch):
    py4j_zip = next(LIB.glob("py4j-*-src.zip"))
    path = ["", str(LIB / "pyspark.zip"), str(py4j_zip), "/user/entry", "/usr/lib/python3.11", str(SITE)]
    monkeypatch.setattr(sys, "path", list(path))
    assert python_workers.prefer_installed_pyspark()
    assert sys.path == ["", "/user/entry", "/usr/lib/python3.11", str(SITE), str(LIB / "pyspark.zip"), str(py4j_zip)]
    assert not python_workers.prefer_installed_pyspark()  # once is enough

    foreign = tmp_path / "spark" / "python" / "lib" / "pyspark.zip"  # a cluster's own SPARK_HOME
    monkeypatch.setattr(sys, "path", ["", str(foreign), str(SITE)])
    assert not python_workers.prefer_installed_pyspark() and sys.path == ["", str(foreign), str(SITE)]


def test_a_spark_submitted_driver_imports_pyspark_with_bytecode(tmp_path):
    script = tmp_path / "where.py"
    script.write_text("from topiclake.lake.spark.python_workers import prefer_installed_pyspark\n"
                      "prefer_installed_pyspark()\nimport pyspark\nprint('PYSPARK', pyspark.__file__)\n")
    done = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), str(script)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"PYSPARK {SITE / 'pyspark' / '__init__.py'}" in done.stdout


def test_the_daemon_is_ours_only_where_the_workers_can_import_it(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert python_workers.can_start_daemon("local[2]") and python_workers.can_start_daemon("local")
    assert not python_workers.can_start_daemon("local-cluster[2,1,1024]")
    assert not python_workers.can_start_daemon("spark://host:7077") and not python_workers.can_start_daemon(None)
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/bin/python")  # workers on another interpreter
    assert not python_workers.can_start_daemon("local[2]")
