"""Stage 1 of an upsert table's run (upsert.py), in the ingest tasks on the executors: a task's
changes (extract.py), newest per key, written as one staging file per touched key bucket under
`<table>/_topiclake_staging/<run_id>/` (Delta never reads `_` directories; vacuum leaves them
alone), in the table's directory or bucket. Once the run commits or fails its staging files go,
and so do stale ones of killed runs."""

from __future__ import annotations

import json
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..table.location import table_filesystem
from .changes import Changes
from .keys import bucket_of, newest_per_key

STAGING_DIR = "_topiclake_staging"
DELETED = "_topiclake_deleted"  # staging files only: True where the change deletes its key
KEY_COLUMNS_META = b"topiclake.key_columns"  # a staging file's key columns, in its schema metadata
_STALE_STAGING_S = 24 * 3600  # staging dirs of killed runs older than this are removed by later runs


def staging_dir(run_id: str) -> str:
    return f"{STAGING_DIR}/{run_id}"


def stage_changes(changes: Changes, *, buckets: int, table_uri: str, run_id: str, task_name: str,
                  compression: str, root=None) -> list[tuple[int, str, int]]:
    """Write a task's changes, newest per key, as one staging file per bucket; (bucket, relative
    path, rows) per file. `root`: the object-store root (S3Root) the table is under, if any."""
    deleted = changes.deleted if isinstance(changes.deleted, pa.Array) else pa.array(changes.deleted)
    rows = changes.rows.append_column(DELETED, deleted.cast(pa.bool_()))
    rows = newest_per_key(rows, changes.key_columns)
    if rows.num_rows == 0:
        return []
    bucket = pa.array(bucket_of(rows, changes.key_columns, buckets))
    rows = rows.replace_schema_metadata({KEY_COLUMNS_META: json.dumps(list(changes.key_columns)).encode()})
    fs, base = table_filesystem(table_uri, root)
    out = []
    for b in pc.unique(bucket).to_pylist():
        part = rows.filter(pc.equal(bucket, b))
        path = f"{staging_dir(run_id)}/bucket-{b}/{task_name}-{uuid.uuid4().hex[:12]}.{compression}.parquet"
        fs.create_dir(f"{base}/{path.rsplit('/', 1)[0]}", recursive=True)
        pq.write_table(part, f"{base}/{path}", filesystem=fs, compression=compression)
        out.append((b, path, part.num_rows))
    return out


def remove_staging(table_uri: str, run_id: str, *, files=None) -> None:
    """After the commit (or a failed run): the run's staging files, and stale ones of killed runs,
    in a directory or a bucket. `files`: the table's (pyarrow filesystem, base path), by default
    the driver's (table/delta.py's table_files: a bucket's server and keys)."""
    if files is None:
        from ..table.delta import table_files

        files = table_files(table_uri)
    fs, base = files
    _remove_tree(fs, f"{base}/{staging_dir(run_id)}")
    try:
        runs = fs.get_file_info(pafs.FileSelector(f"{base}/{STAGING_DIR}", allow_not_found=True))
    except OSError:
        return
    for entry in runs:
        try:
            if time.time() - _last_written(fs, entry) > _STALE_STAGING_S:
                _remove_tree(fs, entry.path)
        except OSError:
            continue


def _remove_tree(fs, path: str) -> None:
    try:
        fs.delete_dir(path)
    except (OSError, FileNotFoundError):  # not there (gone, or never written), or removed meanwhile
        pass


def _last_written(fs, entry) -> float:
    """When a run last wrote into its staging directory (its newest file or directory; a bucket's
    "directories" have no time): a run whose stage 1 runs for days keeps its early files."""
    times = [entry.mtime] + [info.mtime for info in fs.get_file_info(pafs.FileSelector(entry.path, recursive=True))]
    known = [t.timestamp() for t in times if t is not None]
    return max(known) if known else time.time()
