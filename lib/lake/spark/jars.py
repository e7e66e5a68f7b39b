"""Delta Lake inside Spark: delta-spark's JVM jars in every session the project starts.

The jars come from Maven Central once, when the project installs (bin/_env.sh runs
`python -m topiclake.lake.spark.jars install`): Maven resolves the dependencies of pom.xml into a
machine-wide local repository (maven_repo(): ~/.cache/topiclake/m2, or $TOPICLAKE_MAVEN_REPO), and
the venv's jars directory (`<venv>/share/topiclake/jars`) links to them (hard links, else symbolic):
the AWS SDK bundle of s3a is about 690 MB, fetched once per machine, never per venv or job. The
ones pyspark already ships (the same artifact at any version: Jackson, Hadoop, Parquet, log4j...)
are left out, so Spark's own always serve. Beside them goes topiclake's own Delta LogStore,
compiled then (topiclake.lake.spark.logstore). A job never resolves anything when it runs (no
`--packages`): a host without network starts the same.

How a session gets them:
- the driver: on the JVM's own class path, appended after Spark's jars through
  SPARK_DIST_CLASSPATH, which Spark's launcher adds to every spark-submit it builds (the venv's
  spark-submit wrapper sets it, `get_session` sets it for a local session). The same class path at
  every start keeps the JVM's class-data archive valid (topiclake.lake.spark.jvm), Delta's classes in it;
- local and local-cluster executors: the same JVM, or executor JVMs launched by workers inside
  it, which read the same variable;
- a standalone cluster's executors: `spark-submit --jars "$(python -m topiclake.lake.spark.jars
  --jars)"`, as delta-spark's documentation says for any cluster.

`DELTA_CONF` is what every session sets: Delta's SQL extension (time travel, DESCRIBE HISTORY,
DML, OPTIMIZE, VACUUM, RESTORE) and its catalog as the session catalog.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import LakeError
from . import logstore

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
POM = Path(__file__).with_name("pom.xml")
CLASSPATH_ENV = "SPARK_DIST_CLASSPATH"
_STAMP = ".pom-sha256"
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d[\w.]*(?:-\d+)?\.jar$")


def maven_repo() -> Path:
    """The machine's Maven repository for these jars. Not ~/.m2: Maven leaves POM-only entries
    there that break a later `--packages` resolution of the same artifacts."""
    if configured := os.environ.get("TOPICLAKE_MAVEN_REPO"):
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "topiclake" / "m2"


def jars_dir() -> Path:
    return Path(sys.prefix) / "share" / "topiclake" / "jars"


def jar_paths(directory: Path | None = None) -> list[Path]:
    """The installed jars, sorted (a fixed class path order); empty when none are installed."""
    directory = directory or jars_dir()
    return sorted(directory.glob("*.jar")) if directory.is_dir() else []


def require_jars() -> list[Path]:
    jars = jar_paths()
    if not any(j.name.startswith("delta-spark_") for j in jars):
        raise LakeError(f"Delta's jars are not installed in {jars_dir()}: run bin/_env.sh "
                        "(or `python -m topiclake.lake.spark.jars install`, which needs Maven and Maven Central once)")
    return jars


def classpath() -> str:
    return os.pathsep.join(str(j) for j in require_jars())


def with_delta_classpath(environ: dict[str, str]) -> dict[str, str]:
    """`environ` with the jars after whatever SPARK_DIST_CLASSPATH it already has (once)."""
    ours = classpath()
    have = environ.get(CLASSPATH_ENV, "")
    if ours in have.split(os.pathsep) or have.endswith(ours):
        return environ
    return {**environ, CLASSPATH_ENV: f"{have}{os.pathsep}{ours}" if have else ours}


def installed_for(pom: Path = POM, directory: Path | None = None) -> bool:
    """True when the jars in the venv were resolved from this pom."""
    directory = directory or jars_dir()
    stamp = directory / _STAMP
    return stamp.is_file() and stamp.read_text().strip() == _digest(pom) and bool(jar_paths(directory))


def install(pom: Path = POM, directory: Path | None = None, *, spark_jars: Path | None = None,
            repository: Path | None = None) -> list[Path]:
    """Resolve the pom's dependencies with Maven into the machine's repository and link them into
    `directory` (atomically: a failed run leaves the previous jars), without the artifacts Spark's
    own jars directory already has, plus the LogStore jar compiled against them."""
    directory = directory or jars_dir()
    spark_jars = spark_jars or _spark_jars_dir()
    repository = repository or maven_repo()
    spark_has = {_artifact(j.name) for j in spark_jars.glob("*.jar")}
    directory.parent.mkdir(parents=True, exist_ok=True)
    repository.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".jars-", dir=directory.parent))
    try:
        listing = staging / "classpath.txt"
        done = subprocess.run(["mvn", "-q", "-B", "-f", str(pom), "dependency:build-classpath",
                               f"-Dmdep.outputFile={listing}", "-DincludeScope=runtime",
                               f"-Dmaven.repo.local={repository}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            lines = [line for line in done.stdout.splitlines() if "ERROR" in line] or done.stdout.splitlines()[-3:]
            raise LakeError(f"Maven could not resolve {pom}: {' '.join(lines[:3]).strip() or 'no output'}")
        resolved = [Path(entry) for entry in listing.read_text().strip().split(os.pathsep) if entry]
        kept = staging / "jars"
        kept.mkdir()
        for jar in resolved:
            if _artifact(jar.name) not in spark_has:
                _link(jar, kept / jar.name)
        logstore.build(resolved + sorted(spark_jars.glob("*.jar")), kept)
        (kept / _STAMP).write_text(_digest(pom) + "\n")
        old = staging / "old"
        if directory.exists():
            directory.rename(old)
        kept.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return jar_paths(directory)


def _link(source: Path, link: Path) -> None:
    """A hard link to the repository's jar (it stays valid if the repository is cleaned), else a
    symbolic one (another file system); never a copy."""
    try:
        os.link(source, link)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        link.symlink_to(source)


def _artifact(jar_name: str) -> str:
    match = _VERSIONED.match(jar_name)
    return match.group("artifact") if match else jar_name


def _spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _digest(pom: Path) -> str:
    """The pom and the LogStore's source: a change to either installs again."""
    digest = hashlib.sha256(pom.read_bytes())
    for source in logstore.source_files():
        digest.update(source.read_bytes())
    return digest.hexdigest()


def main(argv: list[str]) -> int:
    if argv == ["install"]:
        if installed_for():
            print(f"Delta's jars: {jars_dir()} (up to date)")
            return 0
        jars = install()
        print(f"Delta's jars: {len(jars)} in {jars_dir()}")
        return 0
    if argv == ["--classpath"]:
        print(classpath())
        return 0
    if argv == ["--jars"]:  # spark-submit --jars takes a comma list
        print(",".join(str(j) for j in require_jars()))
        return 0
    print("usage: python -m topiclake.lake.spark.jars install|--classpath|--jars", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except LakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
