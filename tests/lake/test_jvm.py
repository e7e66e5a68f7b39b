"""The driver JVM's start-up options (topiclake.lake.spark.jvm): the venv's spark-submit passes them, the
class-data sharing archive that bin/_env.sh built is one this JVM maps, and a caller's own
SPARK_SUBMIT_OPTS come after them (so they win)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from topiclake.lake.spark.jvm import archive_path, driver_java_options

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
SHOW_JVM_ARGUMENTS = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print("ARGS", " ".join(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                       .getInputArguments()))
spark.stop()
"""


def test_options_name_the_archive_only_when_it_exists(tmp_path):
    assert driver_java_options(tmp_path / "missing.jsa") == "-XX:TieredStopAtLevel=1"
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"")
    options = driver_java_options(archive).split()
    assert {"-XX:TieredStopAtLevel=1", "-Xshare:auto", f"-XX:SharedArchiveFile={archive}"} <= set(options)


def test_spark_submit_starts_the_driver_with_the_archive_mapped(tmp_path):
    assert archive_path().is_file(), "bin/_env.sh builds the archive when it installs the venv"
    script = tmp_path / "show.py"
    script.write_text(SHOW_JVM_ARGUMENTS)
    # -Xshare:on after ours: a JVM that cannot map the archive refuses to start instead of going on without it
    env = {**os.environ, "SPARK_SUBMIT_OPTS": "-Xshare:on", "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([str(SPARK_SUBMIT), "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(script)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    arguments = next(line for line in done.stdout.splitlines() if line.startswith("ARGS ")).split()
    assert f"-XX:SharedArchiveFile={archive_path()}" in arguments and "-XX:TieredStopAtLevel=1" in arguments
    assert arguments.index("-Xshare:on") > arguments.index("-Xshare:auto"), "the caller's options come last"


def test_sql_keeps_the_optimising_compiler(tmp_path):
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"")
    options = driver_java_options(archive, long_queries=True).split()
    assert "-XX:TieredStopAtLevel=1" not in options and f"-XX:SharedArchiveFile={archive}" in options


def test_a_local_session_passes_the_jvms_stderr_on_without_its_incubator_warning(tmp_path):
    """A local session's JVM writes through a filter: what it says reaches stderr (here why it
    could not start at all), all but the one line Spark's launcher always causes."""
    script = ("from topiclake.lake.spark.session import get_session\n"
              "get_session(master='local[1]', conf={'spark.driver.extraJavaOptions': '-Xmx1g'})\n")
    failed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert failed.returncode == 1
    assert "Not allowed to specify max heap(Xmx) memory settings" in failed.stderr  # the launcher's own words
    started = subprocess.run([sys.executable, "-c", "from topiclake.lake.spark.session import get_session\n"
                              "print(get_session(master='local[1]').range(3).count())"],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path,
                             env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert started.returncode == 0 and started.stdout.split()[-1] == "3", started.stderr[-2000:]
    assert "incubator" not in started.stderr
