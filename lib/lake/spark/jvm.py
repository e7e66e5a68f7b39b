"""The driver JVM's start-up: a fixed cost every spark-submit pays (Airflow starts one per task run).

Two settings more than halve it on a small machine and change nothing a job computes:

- class-data sharing (CDS): the classes Spark loads at start are mapped from an archive made once
  per installation (`build_archive`), instead of being found, read, verified and parsed out of
  ~250 jars at every start;
- C1-only JIT (-XX:TieredStopAtLevel=1): a lake job's driver mostly waits while Python decodes in
  the tasks; the optimising C2 compiler would spend CPU seconds of the start-up on code that never
  runs long enough to pay them back. (A cluster's executors keep their own settings.) `topiclake
  sql` keeps C2 (`long_queries`): in local mode its queries run in the driver's JVM, where a
  3 M-row self-join took 4.6-4.7 s with C2 and 5.7-7.6 s with C1 only.

The archive holds the classes of a session with Delta's jars and SQL extension
(topiclake.lake.spark.jars), on the class path every session has: Spark's jars, then Delta's.
`bin/_env.sh` builds the archive when it installs the venv, and its spark-submit wrapper passes
`driver_java_options()` in SPARK_SUBMIT_OPTS (a user's own SPARK_SUBMIT_OPTS come after them, so
they win); `topiclake` commands that start a local session put them in
spark.driver.extraJavaOptions. The JVM ignores a missing or stale archive (-Xshare:auto), silently:
the job then only starts slower. `python -m topiclake.lake.spark.jvm build` makes it again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .jars import DELTA_CONF, with_delta_classpath

# What the archive is made from: a session with Delta (topiclake.lake.spark.jars) and one small
# Arrow job, as a lake job starts, then a small Delta table written, read back and described, as
# `topiclake sql` and the maintenance jobs use Delta.
_WARM_UP = """
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
spark.range(0, 2, 1, 2).mapInArrow(lambda batches: batches, "id BIGINT").toArrow()
table = sys.argv[1]
spark.range(0, 4, 1, 2).write.format("delta").save(table)
spark.sql(f"DESCRIBE HISTORY delta.`{table}`").toArrow()
spark.sql(f"SELECT count(*) FROM delta.`{table}` VERSION AS OF 0").toArrow()
spark.stop()
"""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def archive_path() -> Path:
    """Where this installation keeps the archive: one per pyspark version, inside the venv."""
    from importlib.metadata import version

    return Path(sys.prefix) / "share" / "topiclake" / f"spark-driver-{version('pyspark')}.jsa"


def driver_java_options(archive: Path | None = None, *, long_queries: bool = False) -> str:
    """`long_queries`: the driver JVM does the work itself (Spark SQL in local mode), so it keeps
    the optimising compiler and only starts from the archive."""
    archive = archive or archive_path()
    options = [] if long_queries else ["-XX:TieredStopAtLevel=1"]
    if archive.is_file():
        # Quiet: a stale archive (another JDK, other jars) is skipped without a word on stderr.
        options += ["-Xshare:auto", f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    return " ".join(options)


def build_archive(archive: Path | None = None) -> Path:
    """Run a small Spark job under spark-submit that dumps the classes it loaded into the archive
    (JDK 13+'s dynamic CDS), atomically: the JVM writes it at exit to a temporary name."""
    archive = archive or archive_path()
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="topiclake-cds-") as tmp:
        script = Path(tmp) / "warm_up.py"
        script.write_text(_WARM_UP)
        env = {**with_delta_classpath(dict(os.environ)),
               "SPARK_SUBMIT_OPTS": f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={partial} "
                                    "-Xlog:cds=off -Xlog:cds+dynamic=off",
               "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
               "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
               "SPARK_HOME": os.environ.get("SPARK_HOME", str(spark_home())),
               "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
        delta_conf = [arg for key, value in DELTA_CONF.items() for arg in ("--conf", f"{key}={value}")]
        done = subprocess.run([str(spark_home() / "bin" / "spark-submit"), "--master", "local[1]",
                               "--conf", "spark.ui.enabled=false", *delta_conf, str(script),
                               str(Path(tmp) / "table")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        last = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"building the JVM class archive failed (exit {done.returncode}): {last[0]}")
    os.replace(partial, archive)
    return archive


def main(argv: list[str]) -> int:
    if argv == ["build"]:
        print(f"JVM class archive: {build_archive()}")
        return 0
    if argv == ["options"]:
        print(driver_java_options())
        return 0
    print("usage: python -m topiclake.lake.spark.jvm build|options", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
