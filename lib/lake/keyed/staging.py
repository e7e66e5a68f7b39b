"""Stage 1 of an upsert table's run (upsert.py), in the ingest tasks on the executors: a task's
changes (extract.py), newest per key, written as one staging file per touched key bucket under
`<table>/_topiclake_staging/<run_id>/` (Delta never reads `_` directories; vacuum leaves them
alone). Once the run commits or fails its staging files go, and so do stale ones of killed runs."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .changes import Changes
from .keys import bucket_of, newest_per_key

STAGING_DIR = "_topiclake_staging"
DELETED = "_topiclake_deleted"  # staging files only: True where the change deletes its key
KEY_COLUMNS_META = b"topiclake.key_columns"  # a staging file's key columns, in its schema metadata
_STALE_STAGING_S = 24 * 3600  # staging dirs of killed runs older than this are removed by later runs


def staging_dir(run_id: str) -> str:
    return f"{STAGING_DIR}/{run_id}"


def stage_changes(changes: Changes, *, buckets: int, table_uri: str, run_id: str, task_name: str,
                  compression: str) -> list[tuple[int, str, int]]:
    """Write a task's changes, newest per key, as one staging file per bucket; (bucket, relative
    path, rows) per file."""
    deleted = changes.deleted if isinstance(changes.deleted, pa.Array) else pa.array(changes.deleted)
    rows = changes.rows.append_column(DELETED, deleted.cast(pa.bool_()))
    rows = newest_per_key(rows, changes.key_columns)
    if rows.num_rows == 0:
        return []
    bucket = pa.array(bucket_of(rows, changes.key_columns, buckets))
    rows = rows.replace_schema_metadata({KEY_COLUMNS_META: json.dumps(list(changes.key_columns)).encode()})
    fs, base = pafs.FileSystem.from_uri(table_uri)
    out = []
    for b in pc.unique(bucket).to_pylist():
        part = rows.filter(pc.equal(bucket, b))
        path = f"{staging_dir(run_id)}/bucket-{b}/{task_name}-{uuid.uuid4().hex[:12]}.{compression}.parquet"
        fs.create_dir(f"{base}/{path.rsplit('/', 1)[0]}", recursive=True)
        pq.write_table(part, f"{base}/{path}", filesystem=fs, compression=compression)
        out.append((b, path, part.num_rows))
    return out


def remove_staging(table_uri: str, run_id: str) -> None:
    """After the commit (or a failed run): the run's staging files, and stale ones of killed runs."""
    if "://" in table_uri and not table_uri.startswith("file://"):
        return
    root = table_uri.removeprefix("file://")
    shutil.rmtree(f"{root}/{staging_dir(run_id)}", ignore_errors=True)
    staging = f"{root}/{STAGING_DIR}"
    try:
        entries = list(os.scandir(staging))
    except OSError:
        return
    for entry in entries:
        try:
            if time.time() - _last_written(entry.path) > _STALE_STAGING_S:
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue


def _last_written(directory: str) -> float:
    """When a run last wrote into its staging directory (its newest file or directory): a run
    whose stage 1 runs for days keeps its early files."""
    newest = os.stat(directory).st_mtime
    for parent, _dirs, files in os.walk(directory):
        for path in [parent] + [os.path.join(parent, name) for name in files]:
            try:
                newest = max(newest, os.stat(path).st_mtime)
            except OSError:  # removed meanwhile
                continue
    return newest
