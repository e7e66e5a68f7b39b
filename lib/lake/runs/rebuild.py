"""`topiclake rebuild TABLE --kind K`: a table rebuilt from the log as another kind (or format).

A table never changes kind on its own (keyed/table_kind.py): this command is the explicit way.

0. Refuse (one line) when the log no longer holds rows the table has: a partition whose log
   start offset retention moved past the first offset the table holds would lose those rows;
   `--allow-data-loss` rebuilds anyway.
1. Ingest every topic of the table from its earliest offset into a new table beside it,
   `<tables>/.rebuild-<run>/<name>` (same group, the requested kind; the same name, so the
   settings, schemas and suites of the table apply).
2. Check that nobody committed to the old table meanwhile (else stop: ConcurrentWriterError,
   the old table untouched, the new one left for inspection).
3. Swap the two directories in ONE atomic rename (Linux renameat2 RENAME_EXCHANGE): a reader
   sees the old table or the new one, never neither. The quarantine table, if any, is swapped the
   same way just before. The old table stays at `<tables>/.rebuild-<run>/<name>` (delete it once
   satisfied).

The swap is of local directories: a table at a URI (s3://...) is not rebuilt by this command.
Writers must be stopped during a rebuild (a run committing between the check and the swap would
land in the old table).
"""

from __future__ import annotations

import ctypes
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from topiclake.segments.storage import StorageLayout

from ..errors import ConcurrentWriterError, LakeError, UsageError
from ..keyed import table_kind
from ..log.source import list_partition
from ..sql.query import snapshot_frame
from ..table import delta
from ..table.location import GROUP_PREFIX, resolve_table_uri, table_name
from ..table.values import quarantine_uri
from .ingest import IngestOptions, IngestResult, ingest

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@dataclass(frozen=True, slots=True)
class RebuildOptions:
    root: Path
    table: str
    kind: str
    value_format: str | None = None
    topics: tuple[str, ...] = ()  # default: the topics the table records
    group: str | None = None
    ingest: dict = field(default_factory=dict)  # further IngestOptions (schemas_dir, expectations_dir, ...)
    allow_data_loss: bool = False  # rebuild even where retention deleted offsets the table holds rows of


@dataclass(slots=True)
class RebuildResult:
    table_uri: str
    kind: str
    old_kind: str
    old_location: str
    ingest: IngestResult
    duration_s: float = 0.0


def rebuild(spark, options: RebuildOptions) -> RebuildResult:
    started = time.monotonic()
    layout = StorageLayout(options.root)
    uri = resolve_table_uri(layout, options.table)
    if "://" in uri:
        raise UsageError(f"rebuild swaps local directories; {uri} is not one")
    old = delta.load_table(uri)
    if old is None:
        raise UsageError(f"rebuild: no Delta table at {uri}", hint="check the table name and --data")
    table_kind.check_choice("kind", options.kind, table_kind.KINDS, "--kind")
    have = table_kind.recorded(old)
    topics = options.topics or have.topics or _topics_from_history(old)
    if not topics:
        raise UsageError(f"rebuild: table {table_name(uri)} does not record its topics", hint="pass --topic")
    name = table_name(uri)
    if not options.allow_data_loss:
        check_log_holds_table(spark() if callable(spark) else spark, layout, uri, topics)
    run_id = uuid.uuid4().hex[:12]
    beside = Path(uri).parent / f".rebuild-{run_id}"
    new_uri = str(beside / name)
    version_before = old.version()
    result = ingest(spark, IngestOptions(
        topics=tuple(topics), root=options.root, table=new_uri, group=options.group or GROUP_PREFIX + name,
        starting_offsets="earliest", kind=options.kind, value_format=options.value_format, **options.ingest))
    if delta.load_table(new_uri) is None:
        raise UsageError(f"rebuild of {name}: the topics {', '.join(topics)} hold nothing to rebuild from")
    now = delta.load_table(uri)
    if now is None or now.version() != version_before:
        raise ConcurrentWriterError(f"table {name}: another writer committed during the rebuild (version "
                                    f"{version_before} -> {now.version() if now else 'gone'}); the table is "
                                    f"unchanged, the rebuilt one is left at {new_uri}; stop the writers and run again")
    if Path(quarantine_uri(new_uri)).exists():
        _swap_or_move(quarantine_uri(new_uri), quarantine_uri(uri))
    exchange(new_uri, uri)
    return RebuildResult(uri, options.kind, have.kind, new_uri, result, time.monotonic() - started)


class RebuildDataLossError(LakeError):
    """The log no longer holds offsets the table has rows of: a rebuild would lose them."""


def check_log_holds_table(spark, layout: StorageLayout, uri: str, topics) -> None:
    """Refuse when a partition's log starts after the first offset the table holds (retention
    deleted those records since they were ingested): the rebuilt table would not have them."""
    lost = []
    for (topic, partition), first in sorted(first_offsets(spark, uri).items()):
        if topic not in topics:
            continue
        start = list_partition(layout, topic, partition).log_start_offset
        if first < start:
            lost.append(f"{topic}-{partition} starts at offset {start}, the table holds rows from offset {first}")
    if lost:
        raise RebuildDataLossError(
            f"rebuild of {table_name(uri)} would lose rows retention deleted from the log ({'; '.join(lost)}); "
            "the table is unchanged; pass --allow-data-loss to rebuild without them")


def first_offsets(spark, uri: str) -> dict[tuple[str, int], int]:
    """The lowest offset the table's current snapshot holds per (topic, partition)."""
    rows = snapshot_frame(spark, uri).groupBy("topic", "partition").min("offset").collect()
    return {(r["topic"], r["partition"]): r["min(offset)"] for r in rows}


def _topics_from_history(table) -> tuple[str, ...]:
    """The topics of a table made before tables recorded them: from its ingest commits."""
    topics = set()
    for commit in table.history():
        info = delta.topiclake_info(commit)
        for tp in (info.get("offsets") or {}):
            topics.add(tp.rsplit(":", 1)[0])
    return tuple(sorted(topics))


def _swap_or_move(new: str, old: str) -> None:
    if Path(old).exists():
        exchange(new, old)
    else:
        os.rename(new, old)


def exchange(a: str, b: str) -> None:
    """Swap two directories atomically (renameat2 RENAME_EXCHANGE: Linux 3.15+, local filesystems)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot swap {a} and {b} atomically: {os.strerror(errno)}")


def format_result(result: RebuildResult) -> str:
    return (f"rebuilt table {result.table_uri} as {result.kind} (was {result.old_kind}) from the log: "
            f"{result.ingest.records_read} records read in {result.duration_s:.1f} s; the old table is at "
            f"{result.old_location}")
