"""The Delta LogStore of every session on an object-store table: io.topiclake.delta.S3ConditionalLogStore
(java/ beside this file), which commits `_delta_log/N.json` with a conditional create (S3's
If-None-Match), so two drivers racing for version N never overwrite one another: the loser retries
at N+1. Delta's default for s3a (S3SingleDriverLogStore) is safe within one JVM only.

It is compiled when the project installs (topiclake.lake.spark.jars.install), against the
delta-storage, hadoop-aws and Hadoop client jars, into a small jar beside Delta's.
"""

from __future__ import annotations

import subprocess
import tempfile
import zipfile
from pathlib import Path

from ..errors import LakeError

LOGSTORE_CLASS = "io.topiclake.delta.S3ConditionalLogStore"
JAR_NAME = "topiclake-delta-logstore.jar"
SOURCES = Path(__file__).with_name("java")
# Delta picks a LogStore by the table path's scheme; s3:// paths are s3a too (SCHEME_CONF).
LOGSTORE_CONF = {f"spark.delta.logStore.{scheme}.impl": LOGSTORE_CLASS for scheme in ("s3a", "s3")}
# Hadoop has no s3:// file system of its own: the same s3a client serves both names.
SCHEME_CONF = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
# What the source needs to compile: name prefixes of the jars it is compiled against.
_COMPILE_AGAINST = ("delta-storage-", "hadoop-aws-", "hadoop-client-api-")


def source_files() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def build(available: list[Path], into: Path) -> Path:
    """Compile the LogStore against the `available` jars into `into`/JAR_NAME; LakeError when
    javac is missing or the source does not compile."""
    classpath = [jar for jar in available if jar.name.startswith(_COMPILE_AGAINST)]
    missing = [prefix for prefix in _COMPILE_AGAINST if not any(j.name.startswith(prefix) for j in classpath)]
    if missing:
        jars = ", ".join(p + "*.jar" for p in missing)
        raise LakeError(f"cannot compile {LOGSTORE_CLASS}: no {jars} to compile against")
    with tempfile.TemporaryDirectory(prefix="topiclake-logstore-") as scratch:
        classes = Path(scratch)
        try:
            done = subprocess.run(["javac", "--release", "17", "-nowarn", "-d", str(classes),
                                   "-cp", ":".join(str(j) for j in classpath), *map(str, source_files())],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except FileNotFoundError:
            raise LakeError(f"javac not found: {LOGSTORE_CLASS} is compiled at install "
                            "(install a JDK 17, e.g. apt-get install openjdk-17-jdk-headless)") from None
        if done.returncode != 0:
            raise LakeError(f"javac failed on {SOURCES}: {' '.join(done.stdout.splitlines()[:3])}")
        jar = into / JAR_NAME
        with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: topiclake\n\n")
            for compiled in sorted(classes.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(classes).as_posix())
    return jar
