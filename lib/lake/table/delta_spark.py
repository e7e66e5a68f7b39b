"""Commits through delta-spark's own transaction (OptimisticTransaction in the driver's JVM), for
the commits that delta-rs cannot name truthfully.

A backfill replaces the rows of an offset range: it removes files and adds others. delta-rs
commits removes only in an append (its commitInfo says WRITE / Append, as if nothing had been
taken away); delta-spark names the same change as its own replaceWhere does: WRITE with mode
Overwrite and the replaced range as the predicate, the run's details in `userMetadata`.

The actions are Delta's JSON (paths URI-encoded, as the log keeps them), turned into delta-spark
actions by `Action.fromJson`. The commit carries topiclake's writer guard (a txn action whose
version goes up by one per commit: delta-spark refuses a commit when another one with the same app
id landed since its snapshot, as delta-rs does), and delta-spark's conflict checks refuse it when
another writer removed a file it removes. `precheck(version)` runs on the transaction's snapshot
version before the commit; a lost race is retried on a fresh snapshot.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Sequence
from urllib.parse import quote

from py4j.protocol import Py4JJavaError

from ..errors import ConcurrentWriterError
from .delta import GUARD_APP_ID, MAX_ATTEMPTS, commit_metadata

log = logging.getLogger(__name__)

_CONCURRENT = "org.apache.spark.sql.delta.DeltaConcurrentModificationException"


def log_path(path: str) -> str:
    """A relative file path as the Delta log spells it (a URI path)."""
    return quote(path, safe="/=")


def add_json(path: str, size: int, partition_values: dict[str, str | None], modification_time: int,
             stats: str | None) -> str:
    return json.dumps({"add": {"path": log_path(path), "partitionValues": partition_values, "size": size,
                               "modificationTime": modification_time, "dataChange": True, "stats": stats}})


def remove_json(path: str, size: int | None, partition_values: dict[str, str | None], deletion_ms: int) -> str:
    return json.dumps({"remove": {"path": log_path(path), "deletionTimestamp": deletion_ms, "dataChange": True,
                                  "extendedFileMetadata": True, "partitionValues": partition_values,
                                  "size": size}})


def commit_replace(spark, uri: str, *, actions: Sequence[str], predicate: str, partition_by: Sequence[str],
                   metadata: dict[str, Any], new_schema_json: str | None = None,
                   precheck: Callable[[int], None] | None = None, max_attempts: int = MAX_ATTEMPTS) -> int:
    """Commit `actions` (Delta JSON lines) as one WRITE / Overwrite of the rows `predicate` names;
    returns the new table version. `new_schema_json`: the table's schema grows to it in the same
    commit. Raises ConcurrentWriterError when `precheck` does, or after `max_attempts` lost races."""
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    user_metadata = commit_metadata(metadata).get("userMetadata")
    for attempt in range(1, max_attempts + 1):
        txn = delta.DeltaLog.forTable(spark._jsparkSession, uri).startTransaction()
        version = txn.snapshot().version()
        if precheck is not None:
            precheck(version)
        if new_schema_json is not None:
            current = json.loads(txn.metadata().json())
            current["metaData"]["schemaString"] = new_schema_json
            txn.updateMetadata(delta.actions.Action.fromJson(json.dumps(current)))
        guard = txn.txnVersion(GUARD_APP_ID)  # -1: none yet
        lines = list(actions) + [json.dumps({"txn": {"appId": GUARD_APP_ID, "version": max(guard, 0) + 1,
                                                     "lastUpdated": int(time.time() * 1000)}})]
        parsed = jvm.java.util.ArrayList()
        for line in lines:
            parsed.add(delta.actions.Action.fromJson(line))
        operation = delta.DeltaOperations.Write(
            jvm.org.apache.spark.sql.SaveMode.Overwrite, _some(jvm, _seq(jvm, partition_by)), _some(jvm, predicate),
            _some(jvm, user_metadata), *[_none(jvm)] * 5)
        try:
            return txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(parsed).toList(), operation)
        except Py4JJavaError as exc:
            if not _is_concurrent(jvm, exc):
                raise
            log.warning("commit to %s lost a race (attempt %d of %d): %s", uri, attempt, max_attempts,
                        exc.java_exception.getMessage())
    raise ConcurrentWriterError(f"table {uri}: gave up after {max_attempts} commit attempts lost to other writers")


def _is_concurrent(jvm, exc: Py4JJavaError) -> bool:
    return jvm.java.lang.Class.forName(_CONCURRENT).isInstance(exc.java_exception)


def _some(jvm, value):
    return jvm.scala.Some(value)


def _none(jvm):
    return jvm.scala.Option.empty()


def _seq(jvm, values: Sequence[str]):
    items = jvm.java.util.ArrayList()
    for value in values:
        items.add(value)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(items).toList()
