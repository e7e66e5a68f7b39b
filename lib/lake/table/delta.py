"""Delta commits with the group's offsets inside them (delta-rs `deltalake`).

A group's committed offset for a partition is a Delta idempotency record: a `txn` action with
app id `<group>:<topic>:<partition>` and version = the next offset to read (what
kafka-delta-ingest does). Txn actions are part of the snapshot, so they survive checkpoints and
log clean-up, and `DeltaTable.transaction_version(app_id)` reads them back.

Every commit also carries a shared writer-guard txn whose version goes up by one per commit:
delta-rs rejects a commit whose snapshot is older than a commit carrying the same app id, so two
writers that planned from the same snapshot can never both commit (delta-rs alone would accept
both). Before committing we re-read the table and check that each partition's offset is still
what was planned; a writer that moved them first won, and this run stops (its files are orphans
for vacuum). A commit that lost only the guard (another table writer touched other partitions)
is retried on a fresh snapshot.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable, Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from topiclake.archive.table import app_id

from ..errors import ConcurrentWriterError
from .create_commit import create_table
from .type_changes import widened_columns

log = logging.getLogger(__name__)

GUARD_APP_ID = "topiclake:writer-guard"
MAX_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class OffsetUpdate:
    """Move the group's offset of one partition from `expected` (None: never committed) to `new`."""

    topic: str
    partition: int
    expected: int | None
    new: int


# Object-store roots this process serves (s3://bucket/prefix/ -> deltalake storage_options): a
# table under one is opened with its server and keys wherever this module opens a table.
_ROOT_OPTIONS: dict[str, dict[str, str]] = {}
_ROOTS: dict[str, Any] = {}  # the same prefixes -> their S3Root (a table's creating commit is put there)


def serve_root(root) -> None:
    """Tables under `root`, when it is an object-store root (topiclake.store's S3Root), are opened
    with its storage options from now on; a directory root needs none."""
    from topiclake.store.root import S3Root

    if isinstance(root, S3Root):
        _ROOT_OPTIONS[root.uri().rstrip("/") + "/"] = root.delta_storage_options()
        _ROOTS[root.uri().rstrip("/") + "/"] = root


def served_root(uri: str):
    """The served object-store root (S3Root) `uri` is under (the longest), None for any other."""
    served = [prefix for prefix in _ROOTS if uri.startswith(prefix)]
    return _ROOTS[max(served, key=len)] if served else None


def table_files(uri: str):
    """(pyarrow filesystem, base path) of a table's files on the driver: a bucket's with the
    server and keys of the root it is under (serve_root)."""
    from .location import table_filesystem

    return table_filesystem(uri, served_root(uri))


def storage_options_for(uri: str) -> dict[str, str] | None:
    """The storage_options of the served root `uri` is under (the longest), None for any other."""
    served = [prefix for prefix in _ROOT_OPTIONS if uri.startswith(prefix)]
    return _ROOT_OPTIONS[max(served, key=len)] if served else None


def open_table(uri: str, version: int | None = None) -> DeltaTable:
    """DeltaTable(uri), with the storage options of the root it is under (serve_root)."""
    return DeltaTable(uri, version=version, storage_options=storage_options_for(uri))


def load_table(uri: str, storage_options: dict[str, str] | None = None) -> DeltaTable | None:
    """The table at `uri`, or None; `storage_options`: an object-store root's (S3Root.delta_storage_options),
    by default those of the root it is under (serve_root)."""
    try:
        return DeltaTable(uri, storage_options=storage_options or storage_options_for(uri))
    except TableNotFoundError:
        return None


def committed_offsets(table: DeltaTable | None, group: str,
                      partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    """The group's next offset per partition, None where it never committed."""
    if table is None:
        return {tp: None for tp in partitions}
    history = History(table)
    return {(t, p): group_offset(table, group, t, p, history) for t, p in partitions}


_HISTORY_PAGES = (8, 64, 512, None)  # commits read back, newest first, until the decisive one is found
_MAX_RESTORES = 16


def group_offset(table: DeltaTable, group: str, topic: str, partition: int,
                 history: History | None = None) -> int | None:
    """The group's next offset for one partition: the txn version, unless a RESTORE took the table
    back to a version older than the commit that set it. delta-spark's RESTORE brings back the
    files of the old version but keeps the newest txn actions, so the offsets would stay ahead of
    the data and the records the RESTORE took out would never come back; the offsets follow the
    data instead: the group's offset as of the restored version, and the next ingest reads the
    records again (exactly once against what the table holds). The history is read newest first
    until a commit of this group for the partition (its txn stands) or a RESTORE (go on from its
    target version) is found; other writers' commits (OPTIMIZE, DELETE, ...) are passed over.
    (delta-rs's history of a time-travelled table mislabels versions: only the latest is read.)"""
    key = f"{topic}:{partition}"
    version = table.version()
    restores = 0
    for commit in history or History(table):
        if commit["version"] > version:
            continue
        if commit.get("operation") == "RESTORE" and restores < _MAX_RESTORES:
            target = _restored_version(table, commit.get("operationParameters") or {})
            if target is not None and target < version:
                version, restores = target, restores + 1
                continue
        info = topiclake_info(commit)
        if info.get("group") == group and key in (info.get("offsets") or {}):
            break
    at = table if version == table.version() else open_table(table.table_uri, version)
    return at.transaction_version(app_id(group, topic, partition))


class History:
    """A table's commits newest first, read in growing pages as far as a caller walks (kept, so
    the partitions of one group share the reads)."""

    def __init__(self, table: DeltaTable):
        self.table = table
        self._read: list[dict] = []
        self._complete = False

    def __iter__(self):
        pages = iter(_HISTORY_PAGES)
        position = 0
        while True:
            while position < len(self._read):
                yield self._read[position]
                position += 1
            if self._complete:
                return
            limit = next(pages)
            if limit is not None and limit <= len(self._read):
                continue
            self._read = self.table.history(limit)
            self._complete = limit is None or len(self._read) < limit


def _restored_version(table: DeltaTable, parameters: dict) -> int | None:
    if parameters.get("version") is not None:
        return int(parameters["version"])
    if parameters.get("timestamp"):
        import datetime as dt

        restored = open_table(table.table_uri)
        restored.load_as_version(dt.datetime.fromisoformat(str(parameters["timestamp"]).replace(" ", "T")))
        return restored.version()
    return None


def topiclake_info(commit: dict) -> dict:
    """What a topiclake commit says of itself: its `topiclake` field (delta-rs commits), else its
    userMetadata (delta-spark commits)."""
    info = commit.get("topiclake")
    if isinstance(info, dict):
        return info
    try:
        parsed = json.loads(commit.get("userMetadata") or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def group_starts(snapshot, group: str) -> dict[str, int]:
    """Where the group's first run began per partition (from ingest commit metadata)."""
    starts: dict[str, int] = {}
    if snapshot is None:
        return starts
    for commit in snapshot.history():  # newest first: the last value written is the earliest
        info = commit.get("topiclake") or {}
        if info.get("operation") == "ingest" and info.get("group") == group:
            for tp, (first, _end) in (info.get("ranges") or {}).items():
                starts[tp] = first
            for tp, (first, _end) in (info.get("lost") or {}).items():
                starts[tp] = min(first, starts.get(tp, first))
    return starts


def commit_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """The commitInfo fields of a topiclake commit: `topiclake` (what it did: operation, run,
    group, the offset ranges per topic-partition) also as Delta's `userMetadata`, the field that
    DESCRIBE HISTORY shows."""
    if "topiclake" not in metadata:
        return metadata
    return {**metadata, "userMetadata": json.dumps(metadata["topiclake"], sort_keys=True, separators=(",", ":"))}


def operation_metrics(actions: Sequence[AddAction | RemoveAction]) -> dict[str, str]:
    """DESCRIBE HISTORY's operationMetrics of a commit delta-rs makes with our actions, named as
    delta-spark names a WRITE's (strings, as Delta's log keeps them): the files and rows and bytes it
    adds, and the files and bytes it removes (an upsert merge, a schema-growing overwrite)."""
    adds = [a for a in actions if isinstance(a, AddAction)]
    removes = [a for a in actions if isinstance(a, RemoveAction)]
    rows = sum(json.loads(a.stats).get("numRecords", 0) for a in adds if a.stats)
    metrics = {"numFiles": len(adds), "numOutputRows": rows, "numOutputBytes": sum(a.size for a in adds)}
    if removes:
        metrics.update(numRemovedFiles=len(removes), numRemovedBytes=sum(a.size or 0 for a in removes))
    return {k: str(v) for k, v in metrics.items()}


def commit(uri: str, *, group: str, actions: Sequence[AddAction | RemoveAction], offsets: Sequence[OffsetUpdate],
           schema: pa.Schema | None, partition_by: Sequence[str], metadata: dict[str, Any],
           precheck: Callable[[DeltaTable], None] | None = None, max_attempts: int = MAX_ATTEMPTS,
           evolve: bool = False, configuration: dict[str, str] | None = None,
           transactions: Sequence[Transaction] = ()) -> int:
    """Commit files and offsets in ONE Delta commit; returns the new table version.

    `evolve`: `schema` may add columns (or struct fields) to the table's; the new schema is
    committed in the same commit (see _evolution). `configuration`: table properties of a table
    this commit creates (keyed/table_kind.py records the table's kind there). delta-rs's create refuses
    properties outside `delta.*`, so they go into the creating commit's commitInfo
    (`topiclake.table`, atomic with the table) and right after into the table's configuration in a
    second, metadata-only commit (what DESCRIBE DETAIL and other readers show); table_kind reads
    the commitInfo when a crash fell between the two.

    `transactions`: more txn actions to commit with the offsets (an upsert merge's tombstone
    generations, keyed/tombstones.py).

    Raises ConcurrentWriterError when another writer moved any of these offsets since planning,
    or when `precheck` (called with the snapshot each attempt commits on) raises it. With a
    precheck, the commit lands on exactly that snapshot or not at all: delta-rs would otherwise
    rebase it over a concurrent commit its conflict checker lets through (an OPTIMIZE's removes
    and adds do not conflict with ours there), and the check would have judged another table.
    """
    for update in offsets:
        if update.expected is not None and update.new < update.expected:
            raise ValueError(f"group {group!r} topic {update.topic!r} partition {update.partition}: "
                             f"offset would go back from {update.expected} to {update.new}")
    txns = [Transaction(app_id(group, u.topic, u.partition), u.new) for u in offsets] + list(transactions)
    # txnId (as delta-spark names it in commitInfo) finds this commit's version among concurrent ones
    metadata = {**metadata, "operationMetrics": operation_metrics(actions), "txnId": str(uuid.uuid4())}
    for attempt in range(1, max_attempts + 1):
        table = load_table(uri)
        if table is None:
            if any(u.expected is not None for u in offsets):
                raise ConcurrentWriterError(f"table {uri} disappeared after planning (group {group!r})")
            if configuration:
                metadata = {**metadata, "topiclake": {**metadata.get("topiclake", {}), "table": configuration}}
            if _create(uri, actions, txns, schema, partition_by, metadata):
                if configuration:
                    try:
                        set_properties(uri, configuration)
                    except (DeltaError, OSError) as exc:  # the data and offsets are committed; table_kind heals it
                        log.warning("table %s: created, but its properties were not written (the next run writes "
                                    "them): %s", uri, exc)
                return 0
            continue  # another writer created it first: check its offsets on the next pass
        _check_unchanged(table, uri, group, offsets)
        if precheck is not None:
            precheck(table)
        guard = Transaction(GUARD_APP_ID, (table.transaction_version(GUARD_APP_ID) or 0) + 1)
        mode, commit_schema, filters = (_evolution(table, schema, partition_by, actions) if evolve
                                        else ("append", table.schema(), None))
        # An overwrite removes the files its filters select: its removes are not actions (delta-rs refuses them).
        written = list(actions) if mode == "append" else [a for a in actions if isinstance(a, AddAction)]
        try:
            table.create_write_transaction(
                written, mode=mode, schema=commit_schema, partition_by=list(partition_by), partition_filters=filters,
                commit_properties=CommitProperties(custom_metadata=commit_metadata(metadata),
                                                   app_transactions=txns + [guard],
                                                   max_commit_retries=0 if precheck is not None else None))
        except CommitFailedError as exc:
            log.warning("commit to %s lost a race (attempt %d of %d): %s", uri, attempt, max_attempts, exc)
            continue
        return _landed_version(table, metadata["txnId"])
    raise ConcurrentWriterError(f"table {uri}: gave up after {max_attempts} commit attempts lost to other writers")


def _landed_version(table: DeltaTable, txn_id: str) -> int:
    """The version the commit `txn_id` landed at: the next one unless other writers committed
    between our snapshot and our commit (delta-rs then rebases ours over theirs)."""
    before = table.version()
    table.update_incremental()
    newest = table.version()
    if newest > before + 1:
        for info in table.history(newest - before):
            if info.get("txnId") == txn_id:
                return info["version"]
    return newest


def _evolution(table: DeltaTable, schema: pa.Schema | None, partition_by: Sequence[str],
               actions: Sequence[AddAction | RemoveAction] = ()):
    """(mode, schema, partition filters) of a commit that may grow the schema. delta-rs writes a
    new schema only in an overwrite; an overwrite whose filter matches no file (`IN ()`) removes
    nothing, so the commit is the adds, the new metadata and the txns together. delta-rs refuses
    remove actions in an overwrite: a commit that removes files (an upsert merge) must remove whole
    partitions of the first partition column, which the overwrite's filter then names."""
    if schema is None:
        return "append", table.schema(), None
    want = DeltaSchema.from_arrow(schema)
    if json.loads(want.to_json())["fields"] == json.loads(table.schema().to_json())["fields"]:
        return "append", table.schema(), None
    changed = widened_columns(table, schema)
    if changed:  # only widening.widen_table changes a type (it rewrites the files); never a commit
        raise ConcurrentWriterError(f"table {table.table_uri}: columns {changed} have other types than this run "
                                    "planned with (another writer changed them); nothing was committed, run again")
    column = partition_by[0] if partition_by else table.schema().fields[0].name
    return "overwrite", want, [(column, "in", _removed_partitions(table, column, actions))]


def _removed_partitions(table: DeltaTable, column: str, actions: Sequence[AddAction | RemoveAction]) -> list[str]:
    """The values of `column` whose files the actions remove, all of them (else the overwrite
    would remove files the commit did not plan to: ConcurrentWriterError, nothing committed)."""
    removed = {a.path for a in actions if isinstance(a, RemoveAction)}
    if not removed:
        return []
    values = {a.partition_values.get(column) for a in actions if isinstance(a, RemoveAction)}
    if None in values:
        raise ValueError(f"table {table.table_uri}: a commit that grows the schema removes whole {column} partitions")
    values = sorted(values)
    files = active_files(table)
    key = f"partition.{column}"
    held = {path for path, value in zip(files.column("path").to_pylist(), files.column(key).to_pylist())
            if str(value) in values} if key in files.column_names else set()
    if held != removed:
        raise ConcurrentWriterError(f"table {table.table_uri}: the files of {column} {values} are not the ones this "
                                    "commit replaces (another writer changed them); nothing was committed, run again")
    return values


def set_properties(uri: str, properties: dict[str, str]) -> None:
    """Table properties outside `delta.*`, in a metadata-only commit."""
    open_table(uri).alter.set_table_properties(properties, raise_if_not_exists=False)


def _create(uri, actions, txns, schema, partition_by, metadata) -> bool:
    adds = [a for a in actions if isinstance(a, AddAction)]
    if len(adds) != len(actions):
        raise ValueError(f"table {uri} does not exist: nothing to remove")
    return create_table(uri, DeltaSchema.from_arrow(schema), adds, partition_by,
                        CommitProperties(custom_metadata=commit_metadata(metadata),
                                         app_transactions=txns + [Transaction(GUARD_APP_ID, 1)]),
                        store=_object_store_of(uri))


def _object_store_of(uri: str):
    """(ObjectStore, the table's key under its root) for a table in a bucket, None for a directory."""
    if "://" not in uri or uri.startswith("file://"):
        return None
    from topiclake.store.objects import ObjectStore
    from topiclake.store.root import parse_root

    root = served_root(uri)
    if root is None:
        return ObjectStore(parse_root(uri)), ""
    return ObjectStore(root), uri[len(root.uri().rstrip("/") + "/"):].strip("/")


def _check_unchanged(table: DeltaTable, uri: str, group: str, offsets: Sequence[OffsetUpdate]) -> None:
    moved, history = [], History(table)
    for u in offsets:
        now = group_offset(table, group, u.topic, u.partition, history)
        if now != u.expected:
            moved.append(f"{u.topic}/{u.partition}: planned from {u.expected}, now {now}")
    if moved:
        raise ConcurrentWriterError(
            f"table {uri}: another writer committed offsets of group {group!r} since this run planned "
            f"({'; '.join(moved)}); nothing was committed by this run, its files are left for vacuum")


def active_files(table: DeltaTable) -> pa.Table:
    """The snapshot's add actions with flattened stats (`min.offset`, `partition.record_date`...),
    paths decoded."""
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = pa.array([unquote(p) for p in actions.column("path").to_pylist()], pa.string())
    return actions.set_column(actions.schema.get_field_index("path"), "path", paths)


def add_action(row: dict) -> AddAction:
    """An AddAction from a decode result row (paths are relative and not encoded)."""
    return AddAction(row["path"], row["size"], json.loads(row["partition_values"]), row["modification_time"],
                     True, row["stats"])
