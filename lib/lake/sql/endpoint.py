"""The standing SQL endpoint: one Spark driver that keeps running and serves the topic tables over
Spark Connect (gRPC, port 15002 by default), so a query does not pay a JVM start each time.

`topiclake sql-server` starts it: our usual session (Delta, s3a, the conditional LogStore) with
Spark's own SparkConnectPlugin, the root's tables named in its catalog as `topiclake sql` names
them, and the names kept current (a table created since is named within REFRESH_S). Any Spark
Connect client reaches it: pyspark's (`SparkSession.builder.remote("sc://host:15002")`), Spark's
Connect JDBC driver for BI tools, `topiclake sql` itself.

It records where it listens in the root (`cluster/sql-endpoint.json`, removed at a clean stop),
and `topiclake sql` on the same root uses it when it answers. The record names the root the
server serves and the server says it again (`spark.topiclake.root`), so a client never queries
another root's tables by mistake; a record left by a killed server is ignored (nothing answers).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from topiclake.segments.storage import StorageLayout

from ..errors import UsageError

DEFAULT_PORT = 15002  # Spark Connect's own default
RECORD_PARTS = ("cluster", "sql-endpoint.json")
ROOT_CONF = "spark.topiclake.root"
REFRESH_S = 2.0
SETTLE_S = 5.0
PROBE_TIMEOUT_S = 0.2
ENDPOINT_ENV = "TOPICLAKE_SQL_ENDPOINT"
NO_ENDPOINT = "none"  # --endpoint none: always a Spark of this process

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EndpointRecord:
    url: str  # sc://host:port
    root: str  # the root the server serves (root_identity)
    pid: int


def root_identity(root) -> str:
    """How a root is named in the record and the server's conf: an absolute path, or the URL."""
    return str(Path(root).resolve()) if isinstance(root, Path) else str(root)


# ------------------------------------------------------------------------------------- the record

def read_record(root) -> EndpointRecord | None:
    try:
        if isinstance(root, Path):
            data = (Path(StorageLayout(root).root) / Path(*RECORD_PARTS)).read_bytes()
        else:
            from topiclake.store.errors import ObjectNotFound
            from topiclake.store.objects import ObjectStore

            try:
                data = ObjectStore(root).get("/".join(RECORD_PARTS))
            except ObjectNotFound:
                return None
        fields = json.loads(data)
        return EndpointRecord(str(fields["url"]), str(fields["root"]), int(fields["pid"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # not ours to read: treated as no server


def write_record(root, record: EndpointRecord) -> None:
    data = json.dumps(asdict(record), indent=2).encode()
    if isinstance(root, Path):
        from topiclake.segments.atomic import atomic_write

        path = Path(StorageLayout(root).root) / Path(*RECORD_PARTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    else:
        from topiclake.store.objects import ObjectStore

        ObjectStore(root).put("/".join(RECORD_PARTS), data)


def remove_record(root, record: EndpointRecord) -> None:
    """Only the record this server wrote (a newer server may have replaced it)."""
    if read_record(root) != record:
        return
    if isinstance(root, Path):
        (Path(StorageLayout(root).root) / Path(*RECORD_PARTS)).unlink(missing_ok=True)
    else:
        from topiclake.store.objects import ObjectStore

        ObjectStore(root).delete("/".join(RECORD_PARTS))


# ------------------------------------------------------------------------------------- the client

def answers(url: str) -> bool:
    """Something listens at the endpoint's host and port (a refused connect costs microseconds)."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORT),
                                      timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def choose(root, explicit: str | None) -> str | None:
    """The endpoint `topiclake sql` uses: --endpoint (or $TOPICLAKE_SQL_ENDPOINT, or [sql] endpoint)
    when given, `none` for none; else the root's record when its server answers; else None (this
    process starts its own Spark)."""
    if explicit:
        if explicit == NO_ENDPOINT:
            return None
        url = checked_url(explicit)
        if not answers(url):
            raise UsageError(f"no SQL server answers at {url}",
                             hint=f"start one with `topiclake sql-server`, or pass --endpoint {NO_ENDPOINT}")
        return url
    record = read_record(root)
    if record is None or record.root != root_identity(root) or not answers(record.url):
        return None
    return record.url


def checked_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme != "sc" or not parts.hostname:
        raise UsageError(f"not a Spark Connect endpoint: {text!r}", hint="write it as sc://HOST:PORT")
    return text


def connect(url: str, root):
    """A Spark Connect session on the server at `url`, which must serve `root`."""
    from pyspark.sql import SparkSession

    # pyspark logs every server-side error at ERROR with its JVM trace before raising it: the
    # error reaches the user once, as one line, from the command
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    spark = SparkSession.builder.remote(url).getOrCreate()
    served = spark.conf.get(ROOT_CONF, None)
    if served != root_identity(root):
        spark.stop()
        raise UsageError(f"the SQL server at {url} serves {served or 'no topiclake root'}, "
                         f"not {root_identity(root)}", hint=f"pass the server's root, or --endpoint {NO_ENDPOINT}")
    return spark


def disconnect(spark) -> None:
    """End the client's session on the server. pyspark's stop() releases the session before its
    own pending ReleaseExecute calls are sent, and the server logs each late one as an ERROR with
    its trace: they are waited for first."""
    import concurrent.futures

    concurrent.futures.wait(list(getattr(spark.client, "_release_futures", ())), timeout=10)
    spark.stop()


# ------------------------------------------------------------------------------------- the server

def server_conf(root, *, host: str, port: int) -> dict[str, str]:
    return {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        ROOT_CONF: root_identity(root),
        # every Connect session is a new session of this driver, with the static defaults: a
        # CREATE TABLE there must make a Delta table too, as in `topiclake sql`
        "spark.sql.sources.default": "delta",
    }


def serve(root, *, host: str, port: int, master: str | None, conf: dict[str, str], stop: threading.Event) -> int:
    """Serve until `stop` is set (SIGTERM/SIGINT set it): name the tables, record the endpoint,
    keep the names current, remove the record at the end."""
    from .catalog import open_catalog

    spark, discover = open_catalog(root, app_name="topiclake-sql-server", master=master,
                                   conf={**conf, **server_conf(root, host=host, port=port)})
    from .query import register_tables

    named = set(register_tables(spark, discover()))
    shown = "localhost" if host in ("0.0.0.0", "::") else host
    record = EndpointRecord(f"sc://{shown}:{port}", root_identity(root), os.getpid())
    write_record(root, record)
    print(f"sql-server: serving {len(named)} table(s) of {record.root} at {record.url} "
          f"(Spark UI: {spark.sparkContext.uiWebUrl or 'off'})", flush=True)
    try:
        while not stop.wait(REFRESH_S):
            try:
                found = discover()
                new = {name: location for name, location in found.items()
                       if name not in named and _settled(root, location)}
                named = (named & set(found)) | set(register_tables(spark, new))
            except Exception as exc:  # noqa: BLE001 - a listing that failed once is tried again
                log.warning("sql-server: could not refresh the table names: %s", exc)
    finally:
        remove_record(root, record)
    print("sql-server: stopped", flush=True)
    return 0


def _settled(root, location: str) -> bool:
    """A table committed at least SETTLE_S ago: one a statement is creating right now (its directory
    and first commit exist before its catalog entry does) is left to that statement to name, or
    the statement would fail with "already exists"."""
    import time

    horizon = time.time() - SETTLE_S
    if isinstance(root, Path):
        return any(p.stat().st_mtime < horizon for p in (Path(location) / "_delta_log").glob("*.json"))
    from topiclake.store.objects import ObjectStore

    name = location.rstrip("/").rsplit("/", 1)[-1]
    return any(info.key.endswith(".json") and info.last_modified.timestamp() < horizon
               for info in ObjectStore(root).list(f"tables/{name}/_delta_log"))


def stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(_signum, _frame) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def port_free(host: str, port: int) -> None:
    """Refuse a port something already listens on, in one line, before the JVM starts."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}",
                             hint="pass another --port") from None
