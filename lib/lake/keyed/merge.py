"""Stage 2 of an upsert table's run (upsert.py), one Spark task per touched key bucket on the
executors: the bucket's current files (from the snapshot the driver planned on), its remembered
deletes (tombstones.py) and this run's staging files (staging.py); per key the newest row wins
(keys.py), deleted winners are dropped, and the survivors are written as one new Parquet file with
the stats ingest writes. A bucket where nothing changes is left as it is."""

from __future__ import annotations

import json
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import ConcurrentWriterError
from ..table.files import file_stats, plain_layout, write_parquet
from ..table.location import table_filesystem
from . import tombstones
from .keys import newest_per_key
from .staging import DELETED, KEY_COLUMNS_META
from .table_kind import KEY_BUCKET

_SOURCE = "_topiclake_source"  # 0 what the bucket held, 1 this run's change


def merge_bucket(job: dict) -> dict:
    """One bucket: current files + remembered deletes (tombstones.py) + staging files -> one new
    data file (or none) and, where the deletes changed, a new tombstone file. `data_changed` False:
    no change wins over what the bucket's files hold, so they stay."""
    fs, base = table_filesystem(job["table_uri"], job.get("root"))
    schema = pa.ipc.read_schema(pa.py_buffer(job["schema"]))  # the data columns, no partition column
    staged = [pq.read_table(f"{base}/{p}", filesystem=fs) for p in job["changes"]]
    key_columns = tuple(json.loads(staged[0].schema.metadata[KEY_COLUMNS_META]))
    current = [_conform(plain_layout(pq.read_table(f"{base}/{p}", filesystem=fs)), schema) for p in job["current"]]
    held = sum(t.num_rows for t in current)
    remembered, deletes_held = [], 0
    if job["tombstones"] is not None:
        try:
            file = pq.read_table(f"{base}/{job['tombstones']}", filesystem=fs)
        except FileNotFoundError:  # superseded by a commit after this run planned: it cannot commit
            raise ConcurrentWriterError(f"table {job['table_uri']}: another writer changed key bucket {job['bucket']} "
                                        "since this merge planned; nothing was committed, run again") from None
        deletes_held = file.num_rows
        file = tombstones.unexpired(file, now_us=job["now_us"], retention_ms=job["retention_ms"])
        remembered = [_marked(_conform(plain_layout(file), schema), True, file.column(tombstones.REMEMBERED_AT))]
    changes = [_marked(_conform(plain_layout(t), schema), t.column(DELETED)) for t in staged]
    rows = pa.concat_tables([_marked(t, False) for t in current] + remembered + changes)
    old_rows = held + sum(t.num_rows for t in remembered)
    source = pa.array(np.concatenate([np.zeros(old_rows, np.int8), np.ones(rows.num_rows - old_rows, np.int8)]))
    winners = newest_per_key(rows.append_column(_SOURCE, source), key_columns)
    deleted = winners.column(DELETED)
    kept = winners.filter(pc.invert(deleted)).drop_columns([tombstones.REMEMBERED_AT])
    deletes = tombstones.stamped(winners.filter(deleted), now_us=job["now_us"])
    data_changed = _count_new(kept) > 0 or kept.num_rows != held
    deletes_changed = _count_new(deletes) > 0 or deletes.num_rows != deletes_held
    result = {"bucket": job["bucket"], "data_changed": data_changed, "add": None, "records": held,
              "tombstones": None, **_rows_changed(current, kept, winners.filter(deleted), key_columns)}
    if deletes_changed:
        generation = tombstones.new_generation(job["tombstone_generation"])
        path = tombstones.path_of(job["bucket"], generation)
        fs.create_dir(f"{base}/{path.rsplit('/', 1)[0]}", recursive=True)
        pq.write_table(deletes.select(list(key_columns) + list(tombstones.KEPT_COLUMNS)), f"{base}/{path}",
                       filesystem=fs, compression="zstd")
        result["tombstones"] = generation
    if not data_changed:
        return result
    kept = kept.drop_columns([DELETED, _SOURCE])
    result["records"] = kept.num_rows
    if kept.num_rows:
        kept = kept.take(pc.sort_indices(kept, [("topic", "ascending"), ("partition", "ascending"),
                                                ("offset", "ascending")]))
        name = f"{KEY_BUCKET}={job['bucket']}/part-upsert-{job['run_id']}-{uuid.uuid4().hex[:12]}.snappy.parquet"
        fs.create_dir(f"{base}/{KEY_BUCKET}={job['bucket']}", recursive=True)
        write_parquet(kept, f"{base}/{name}", filesystem=fs)
        info = fs.get_file_info(f"{base}/{name}")
        result["add"] = {"path": name, "size": info.size,
                         "partition_values": json.dumps({KEY_BUCKET: str(job["bucket"])}),
                         "modification_time": int(time.time() * 1000), "num_records": kept.num_rows,
                         "stats": file_stats(kept)}
    return result


def _rows_changed(current: list[pa.Table], kept: pa.Table, deleted: pa.Table, key_columns) -> dict[str, int]:
    """The rows this run's changes made: inserted (a key the bucket did not hold), updated (a
    held key's row replaced) and deleted (a held key's row gone)."""
    held = pa.concat_tables([t.select(list(key_columns)) for t in current]) if current else None

    def new_and_held(winners: pa.Table) -> tuple[int, int]:
        mine = winners.filter(pc.equal(winners.column(_SOURCE), 1)).select(list(key_columns))
        if held is None or not mine.num_rows or not held.num_rows:
            return mine.num_rows, 0
        return mine.num_rows, mine.join(held, list(key_columns), join_type="left semi").num_rows

    written, updated = new_and_held(kept)
    _, removed = new_and_held(deleted)
    return {"inserted": written - updated, "updated": updated, "deleted": removed}


def _marked(rows: pa.Table, deleted, remembered_at=None) -> pa.Table:
    """`rows` with the merge's columns: DELETED (a bool, or a column), and REMEMBERED_AT (null
    but for remembered deletes)."""
    if isinstance(deleted, bool):
        deleted = pa.repeat(pa.scalar(deleted), rows.num_rows)
    if remembered_at is None:
        remembered_at = pa.nulls(rows.num_rows, pa.int64())
    return rows.append_column(DELETED, deleted).append_column(
        pa.field(tombstones.REMEMBERED_AT, pa.int64()), remembered_at)


def _count_new(rows: pa.Table) -> int:
    """How many of the winners came from this run's changes (not from what the bucket held)."""
    return pc.sum(pc.cast(pc.equal(rows.column(_SOURCE), 1), pa.int64())).as_py() or 0


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The data columns in the table's order and types; a column added after the file was written
    (a CDC table's new field, committed with this merge) is null in its rows."""
    for column in schema:
        if column.name not in table.column_names:
            table = table.append_column(column, pa.nulls(table.num_rows, column.type))
    return table.select(schema.names).cast(schema)
