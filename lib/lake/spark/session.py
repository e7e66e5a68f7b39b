"""The Spark session every lake job uses.

Settings that are correctness, not tuning: the session time zone is UTC (record dates and
timestamps must not depend on the machine that runs the job), Parquet timestamps are written as
microseconds (Delta has no nanosecond or INT96 timestamps), and Arrow transfer is on (toArrow
moves column batches, never per-record Python objects). Every session has Delta: its SQL
extension and catalog, its jars on the driver's class path (topiclake.lake.spark.jars), and for
s3:// and s3a:// tables s3a with topiclake's conditional-create LogStore (topiclake.lake.spark.logstore);
a session for an object-store root gets that root's server, region and keys (S3Root.hadoop_conf).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from ..errors import LakeError
from . import python_workers
from .jars import DELTA_CONF, with_delta_classpath
from .logstore import LOGSTORE_CONF, SCHEME_CONF

DEFAULT_MASTER = "local[*]"

REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
}


def storage_conf(root=None) -> dict[str, str]:
    """The session settings for tables on object storage: s3:// served by s3a, commits through the
    conditional LogStore, and for an S3Root (topiclake.store.root) its s3a client settings."""
    conf = {**SCHEME_CONF, **LOGSTORE_CONF}
    hadoop_conf = getattr(root, "hadoop_conf", None)
    if hadoop_conf is not None:
        conf.update({f"spark.hadoop.{key}": value for key, value in hadoop_conf().items()})
    return conf


def get_session(app_name: str = "topiclake", *, master: str | None = None, conf: dict[str, str] | None = None,
                long_queries: bool = False, root=None):
    """The active session if there is one (spark-submit, a test fixture), else a new one.

    `master` defaults to spark-submit's choice, then $MASTER, then local[*]. Without spark-submit,
    Python workers run the driver's interpreter unless PYSPARK_PYTHON says otherwise.
    `long_queries`: a new local driver keeps the JVM's optimising compiler (topiclake.lake.spark.jvm),
    for SQL whose work runs in that JVM. `root`: the storage root whose tables the session reads
    and writes (an S3Root brings its s3a settings; see storage_conf).
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in REQUIRED_CONF.items():  # all of them are runtime SQL settings
            active.conf.set(key, value)
        _apply_storage_conf(active, storage_conf(root))
        return active
    options = {"spark.app.name": app_name, **DELTA_CONF, **storage_conf(root)}
    if _submitted():
        _check_delta_loadable()
    if master or not _submitted():
        master = master or os.environ.get("MASTER", DEFAULT_MASTER)
        options["spark.master"] = master
        # Local workers run this Python; under spark-submit the cluster's setting is left alone
        # (a remote executor may not have this interpreter path).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        options["spark.driver.extraJavaOptions"] = _local_driver_java_options(long_queries)
    master = master or _submitted_master()
    if master and master.startswith("local"):
        # Delta rebuilds a table's state in spark.databricks.delta.snapshotPartitions tasks (50 by
        # default, for clusters): on one machine, a task per core (a small table's first query
        # took 10-20 s with 50, about 2 s with 2 on 2 cores).
        # Likewise VACUUM lists a table in spark.sql.sources.parallelPartitionDiscovery.parallelism
        # tasks (10,000 by default: a minute for a small table on 2 cores).
        cores = str(_local_cores(master))
        options["spark.databricks.delta.snapshotPartitions"] = cores
        options["spark.sql.sources.parallelPartitionDiscovery.parallelism"] = cores
    if python_workers.can_start_daemon(master):
        # Spark starts its Python worker daemon through topiclake.lake.spark.python_workers (pyspark from
        # the installed package's bytecode, preloaded before the workers fork).
        options["spark.python.daemon.module"] = python_workers.DAEMON_MODULE
    # The workers' Arrow memory from jemalloc: pyarrow's default (mimalloc) hands a task's freed
    # buffers back to the OS at once, so every task faulted ~100 MB of fresh pages again (a third
    # of its time).
    options["spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL"] = os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    options.update({**REQUIRED_CONF, **(conf or {})})
    if not _submitted():
        _launch_local_jvm(options, loopback=master.startswith("local"))
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if _spark_log_verbose:  # Spark sets a pyspark driver's level to WARN as it starts, as for a shell
        session.sparkContext.setLogLevel("INFO")
    return session


def _apply_storage_conf(session, conf: dict[str, str]) -> None:
    """A running session takes the storage settings too: the Hadoop ones in the context's Hadoop
    configuration (which file systems created from now on read), Delta's as SQL settings."""
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in conf.items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key.removeprefix("spark.hadoop."), value)
        else:
            session.conf.set(key, value)


# The JVM's own start-up line: Spark's launcher always adds this incubator module (a Java 17 JVM
# then warns on stderr; no option turns the warning off).
_JVM_NOISE = b"WARNING: Using incubator modules: jdk.incubator.vector\n"


def _local_cores(master: str) -> int:
    """The cores of a local master: local[N] / local[N,F] -> N, local-cluster[E,C,M] -> E*C, else all."""
    import re

    if match := re.fullmatch(r"local\[(\d+)(?:,\d+)?\]", master):
        return max(1, int(match.group(1)))
    if match := re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),\s*\d+\]", master):
        return max(1, int(match.group(1)) * int(match.group(2)))
    return os.cpu_count() or 1


def _launch_local_jvm(options: dict[str, str], *, loopback: bool) -> None:
    """Start the driver JVM as pyspark would (spark-submit with these settings), with its stderr
    and stdout passed on to our stderr as they come, minus the JVM's incubator-module warning. The reader runs
    before the JVM starts, so a JVM that fails to start is heard and one that writes a lot never
    blocks on a full pipe.

    `loopback` (a local master): unless SPARK_LOCAL_IP says otherwise, the driver, and so its web
    UI, listen on 127.0.0.1 only (Spark would listen on every interface, and warn when the host's
    name resolves to a loopback address)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False)
    for key, value in options.items():
        conf.set(key, value)
    read_end, write_end = os.pipe()
    reader = threading.Thread(target=_pass_on_jvm_stderr, args=(read_end,), name="spark-jvm-stderr", daemon=True)
    reader.start()
    environ_before = dict(os.environ)
    os.environ.update(with_delta_classpath(environ_before))  # launch_gateway hands os.environ to the JVM
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        # The JVM's stdout too: what Spark and Delta print there (VACUUM's "Deleted N files") is
        # log, not a result; our stdout carries only the command's results and summaries.
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end, "stdout": write_end})
    except BaseException:
        os.close(write_end)
        reader.join(2)  # the JVM's last words before our error
        raise
    finally:
        os.environ.clear()
        os.environ.update(environ_before)
    os.close(write_end)  # the JVM (and the Python workers it starts) hold the pipe now
    SparkContext._ensure_initialized(gateway=gateway)


def _pass_on_jvm_stderr(fd: int) -> None:
    """Copy the pipe to stderr chunk by chunk (a progress bar's bare \r lines too), holding back
    only what could be the start of the warning line; a stderr that fails never stops the draining."""
    pending = b""
    with open(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            data = (pending + chunk).replace(_JVM_NOISE, b"")
            held = next((k for k in range(min(len(data), len(_JVM_NOISE) - 1), 0, -1)
                         if data.endswith(_JVM_NOISE[:k])), 0)
            pending = data[len(data) - held:] if held else b""
            _write_stderr(data[:len(data) - held])
    _write_stderr(pending)


def _write_stderr(data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(2, view):]
        except OSError:  # stderr closed or a broken pipe: the JVM's output goes nowhere, as it would
            return


def _check_delta_loadable() -> None:
    """Under a spark-submit that is not the venv's (which puts Delta's jars on the driver's class
    path), Delta must come with --jars: without it the session would fail at its first SQL."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    if not SparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(DELTA_CONF["spark.sql.extensions"]):
        error = LakeError("Delta's jars are not on this spark-submit's class path")
        error.hint = ("run the venv's spark-submit (.venv/bin/spark-submit), or pass "
                      '--jars "$(python -m topiclake.lake.spark.jars --jars)"')
        raise error


def _submitted_master() -> str | None:
    """The master spark-submit chose (its JVM holds the settings as system properties)."""
    if not _submitted():
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return SparkConf().get("spark.master", None)


def _submitted() -> bool:
    """True under spark-submit, which launched this Python and already chose the master."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


# ------------------------------------------------------------------ Spark's own log, clean stop

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
_spark_log_verbose = False


def set_spark_log(*, verbose: bool) -> None:
    """Spark's driver log: warnings and errors only (log4j2.properties beside this file), or
    Spark's own configuration when `verbose`. Under spark-submit the driver JVM already runs when
    Python starts: it is reconfigured now, before the SparkContext starts; a local session's JVM
    gets the file when it starts (get_session)."""
    global _spark_log_verbose
    _spark_log_verbose = verbose
    if verbose:
        if _submitted():  # the venv's spark-submit starts the JVM with our quiet configuration
            from pyspark import SparkContext

            SparkContext._ensure_initialized()
            jvm = SparkContext._jvm
            defaults = jvm.org.apache.spark.util.Utils.getSparkClassLoader().getResource(
                "org/apache/spark/log4j2-defaults.properties")
            jvm.org.apache.logging.log4j.LogManager.getContext(False).setConfigLocation(defaults.toURI())
        return
    from pyspark.logger import PySparkLogger

    # pyspark logs every SQL error as JSON on stderr before raising it: the command reports it once
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    if not _submitted():
        return
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # attaches to spark-submit's JVM; starts nothing
    jvm = SparkContext._jvm
    # Spark sets up its logging when the SparkContext starts, replacing any configuration it
    # finds then: let it do so now (silently), then put ours in place.
    jvm.org.apache.spark.SparkConf().initializeLogIfNecessary(False, True)
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    context.setConfigLocation(jvm.java.net.URI(LOG4J_CONFIG.as_uri()))


def leave_ctrl_c_to_python() -> None:
    """Under spark-submit, a terminal's Ctrl-C reaches the driver JVM as well as this Python; the
    JVM would exit at once and take the job's last words with it (Python's output goes through
    it). Like pyspark's own local gateway, it ignores SIGINT instead: Python cancels the jobs,
    says what was committed, stops the session and exits 130, and the JVM exits with it."""
    if not _submitted():
        return
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("INT"), jvm.sun.misc.SignalHandler.SIG_IGN)


def _local_driver_java_options(long_queries: bool = False) -> str:
    """A local session's JVM: topiclake.lake.spark.jvm's start-up options, and our log4j2 configuration
    unless set_spark_log(verbose=True)."""
    from .jvm import driver_java_options

    options = driver_java_options(long_queries=long_queries)
    if not _spark_log_verbose:
        options += f" -Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    return options


def active_session():
    """The running SparkSession, or None; never imports pyspark when no job has loaded it."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def stop_session(session, *, interrupted: bool = False) -> None:
    """Stop a session this process started, while its executors are alive: left to the JVM's
    shutdown hooks, a local-cluster ends in hundreds of lines of ERROR traces (workers relaunching
    executors during shutdown). After a Ctrl-C, Spark's log is silenced first (unless asked for):
    the stop races the killed tasks' last status updates, which Spark logs as errors.

    pyspark's stop then waits for its accumulator server, whose connection handler looks for the
    stop once a second: up to a second at the end of every job that ran Python tasks. Once the JVM
    has stopped (it sends the server nothing more), the server is shut down beside the caller
    instead (a daemon thread, gone with the process if it exits first)."""
    sc = session.sparkContext
    server = getattr(sc, "_accumulatorServer", None)
    sc._accumulatorServer = None
    if interrupted and not _spark_log_verbose:
        sc.setLogLevel("OFF")
    session.stop()
    if server is not None:
        threading.Thread(target=server.shutdown, name="topiclake-accumulator-server-stop", daemon=True).start()


def collect(rdd) -> list:
    """rdd.collect(), run in a thread while the calling (main) thread waits for it.

    pyspark's Ctrl-C handler cancels the jobs through py4j from the main thread. An RDD action
    blocks in a py4j call until its job ends, so a Ctrl-C landing there made the handler re-enter
    the same py4j connection (errors and tracebacks instead of a clean stop); a waiting main thread
    is outside py4j. The job's error, or the KeyboardInterrupt, reaches the caller as usual. The
    thread is pyspark's InheritableThread: the job keeps the caller's job group and description."""
    from pyspark import InheritableThread

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["rows"] = rdd.collect()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            outcome["error"] = exc

    worker = InheritableThread(target=run, name="topiclake-collect", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)  # short waits: a signal handler runs between them
    if "error" in outcome:
        raise outcome["error"]
    return outcome["rows"]
