"""Python start-up under Spark: where pyspark is imported from, and the workers' daemon.

spark-submit, and Spark when it starts Python workers, put `$SPARK_HOME/python/lib/pyspark.zip` and
py4j's zip first on the Python path. When pyspark is pip-installed, SPARK_HOME is that very
package, and the zips hold the same code as the installed modules beside them; but a zip carries
sources only, so every driver and every Python worker compiled pyspark's ~200 modules again
(~0.4 s of CPU each, at every start). `prefer_installed_pyspark()` moves those zips behind the
installed package (with pip's bytecode); it changes nothing when the zips belong to another Spark
(a cluster's own SPARK_HOME) or py4j's versions differ.

`spark.python.daemon.module = topiclake.lake.spark.python_workers` makes Spark start its worker daemon
through this module: the path fix, then pyspark's worker code imported once in the daemon, so each
forked worker starts with it. (Nothing that starts threads is imported before the fork: pyarrow
and pandas load in the workers, as pyspark's own daemon requires.) The daemon starts before a
task's --py-files reach the path, so this needs topiclake installed where the workers run: the
lake's sessions use it on a local master whose workers run this interpreter (`can_start_daemon`);
a cluster whose executors have topiclake installed can set it itself.
"""

from __future__ import annotations

import os
import sys

DAEMON_MODULE = __name__


def prefer_installed_pyspark() -> bool:
    """Move the installed pyspark's own zips (and py4j's, if the installed py4j is that version)
    from the front of sys.path to just after the directory holding the installed package; every
    other entry keeps its place. True when it moved something."""
    zips = [entry for entry in sys.path if _own_zip(entry)]
    if not zips:
        return False
    home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(zips[0])))))
    installed = [i for i, entry in enumerate(sys.path) if entry and os.path.abspath(entry) == home]
    if not installed or not all(_py4j_matches(z, home) for z in zips if os.path.basename(z).startswith("py4j-")):
        return False
    if sys.path.index(zips[0]) > installed[0]:
        return False  # already behind the installed package
    rest = [entry for entry in sys.path if entry not in zips]
    at = rest.index(sys.path[installed[0]]) + 1
    sys.path[:] = rest[:at] + zips + rest[at:]
    return True


def can_start_daemon(master: str | None) -> bool:
    """True when Spark's Python workers will certainly import this module: a local master
    (executors in the driver's JVM, on this machine) whose workers run this interpreter, with
    topiclake installed in it (not only on a --py-files zip)."""
    if not master or not (master == "local" or master.startswith("local[")):
        return False
    worker_python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    if os.path.abspath(worker_python) != os.path.abspath(sys.executable):  # not realpath: venvs share a base
        return False
    from importlib.util import find_spec

    spec = find_spec("topiclake")
    origin = spec.origin if spec is not None else None
    return bool(origin) and os.path.isfile(origin)  # a file, not a member of a zip


def _own_zip(entry: str) -> bool:
    """A zip under <dir>/pyspark/python/lib/ where <dir>/pyspark is an installed package."""
    name = os.path.basename(entry)
    if not (name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip"))):
        return False
    lib = os.path.dirname(os.path.abspath(entry))
    package = os.path.dirname(os.path.dirname(lib))
    return (os.path.basename(package) == "pyspark" and lib == os.path.join(package, "python", "lib")
            and os.path.isfile(os.path.join(package, "__init__.py")))


def _py4j_matches(zip_path: str, home: str) -> bool:
    """py4j-<version>-src.zip, and an installed py4j of that version in `home`."""
    wanted = os.path.basename(zip_path)[len("py4j-"):-len("-src.zip")]
    return os.path.isdir(os.path.join(home, f"py4j-{wanted}.dist-info")) and \
        os.path.isfile(os.path.join(home, "py4j", "__init__.py"))


if __name__ == "__main__":  # Spark's worker daemon (spark.python.daemon.module)
    prefer_installed_pyspark()
    import pyspark.worker  # noqa: F401  (imported once here; the forked workers start with it)
    from pyspark.daemon import manager

    manager()
