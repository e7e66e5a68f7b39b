"""The deletes an upsert table remembers, per key bucket.

Why: which change of a key is newest is decided by offset within one topic partition, and by
timestamp across partitions (upsert.py). A delete that won leaves no row behind, so without a
record of it an OLDER change that arrives later from another partition (a lagging partition, a
backfill of another partition, a second topic) would find nothing to lose against and bring the
key back; the result would depend on where runs happened to split the log.

Where: one Parquet file per key bucket, `_topiclake_tombstones/bucket-<b>/<generation>.parquet`,
holding the bucket's deleted keys with the topic, partition, offset and timestamp of the change
that deleted them. The bucket's current generation is a Delta `txn` action (app id
`topiclake:tombstones:<b>`, version = generation) committed in the same commit as the merged files
and the group's offsets: every snapshot names the tombstones that belong to its rows, and a killed
run's file is named by none. Readers never see them (Delta skips `_` directories; VACUUM leaves
them alone); the merge removes superseded generations after its commit.

A tombstone is kept for `topiclake.tombstones.retention.ms` (a table property, 7 days by default)
after the merge that first kept it, as Kafka keeps a tombstone for `delete.retention.ms` after the
cleaner first meets it: a change older than the delete that arrives even later than that can bring
the key back.
"""

from __future__ import annotations

import secrets
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake.transaction import Transaction

TOMBSTONES_DIR = "_topiclake_tombstones"
RETENTION_PROPERTY = "topiclake.tombstones.retention.ms"
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
NONE = 0  # the generation of a bucket without tombstones
REMEMBERED_AT = "remembered_at_us"  # when the merge first kept the delete (epoch microseconds)
KEPT_COLUMNS = ("topic", "partition", "offset", "timestamp", REMEMBERED_AT)  # what a tombstone keeps beside its key


def app_id(bucket: int) -> str:
    return f"topiclake:tombstones:{bucket}"


def path_of(bucket: int, generation: int) -> str | None:
    """The file of a bucket's tombstones, relative to the table (None: the bucket has none)."""
    return None if generation == NONE else f"{TOMBSTONES_DIR}/bucket-{bucket}/{generation}.parquet"


def generations(table, buckets) -> dict[int, int]:
    """The current tombstone generation of each bucket in the snapshot (NONE where it has none)."""
    if table is None:
        return {b: NONE for b in buckets}
    return {b: table.transaction_version(app_id(b)) or NONE for b in buckets}


def new_generation(current: int) -> int:
    """A generation no other run picks: milliseconds (so later ones are larger) and 20 random bits,
    always above the one it replaces, whatever the executor's clock says (cleanup relies on it)."""
    return max((time.time_ns() // 1_000_000) << 20 | secrets.randbits(20), current + 1)


def transaction(bucket: int, generation: int) -> Transaction:
    return Transaction(app_id(bucket), generation)


def retention_ms(table) -> int:
    """The table's tombstone retention (its property, else the default)."""
    if table is None:
        return DEFAULT_RETENTION_MS
    value = table.metadata().configuration.get(RETENTION_PROPERTY)
    try:
        return int(value) if value is not None else DEFAULT_RETENTION_MS
    except ValueError:
        raise ValueError(f"table {table.table_uri}: {RETENTION_PROPERTY} must be milliseconds, not {value!r}") from None


def remove_superseded(table_uri: str, current: dict[int, int]) -> None:
    """After a commit: each bucket's tombstone files older than its current generation. They are
    superseded, or written by a run that can no longer commit (its precheck compares generations,
    and a new generation is always above the one its run read). Best effort: a leftover is only
    disk space."""
    from ..table.delta import table_files

    fs, base = table_files(table_uri)
    for bucket, generation in current.items():
        directory = f"{base}/{TOMBSTONES_DIR}/bucket-{bucket}"
        try:
            infos = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        except OSError:
            continue
        for info in infos:
            stem = info.base_name.split(".", 1)[0]
            if stem.isdigit() and int(stem) < generation:
                try:
                    fs.delete_file(info.path)
                except OSError:
                    pass


def unexpired(remembered, *, now_us: int, retention_ms: int):
    """The remembered deletes kept less than the retention ago: the others take no part in the
    merge (an older change than such a delete may win again)."""
    return remembered.filter(pc.greater_equal(remembered.column(REMEMBERED_AT), now_us - retention_ms * 1000))


def stamped(deletes, *, now_us: int):
    """The winning deletes to remember, this run's (REMEMBERED_AT null) remembered from now on."""
    at = pc.fill_null(deletes.column(REMEMBERED_AT), pa.scalar(now_us, pa.int64()))
    return deletes.set_column(deletes.schema.get_field_index(REMEMBERED_AT), REMEMBERED_AT, at)
