"""How far behind its log each table is, derived from the files alone (no job running, no Spark).

For every Delta table under `<root>/tables` (deltalake reads the snapshot) and every partition
of the topics its ingest group reads (lib/segments reads the log):

- committed: the group's next offset, the txn version in the table (delta.committed_offsets);
- log end: the high watermark, the end of the partition's last whole batch;
- lag = log end - committed (records);
- corrupt: the offset where the log is damaged past committed (log/damage.py); the log end is then
  the end the files hold beyond it, so the lag never reads 0 while the ingest is stuck there;
- freshness = (timestamp of the last record in the log) - (timestamp of the newest committed
  record), seconds. A record's timestamp is its batch's max timestamp (Kafka's time index keeps
  the same), and the newest committed record is the last data batch that starts below the
  committed offset: control batches (transaction markers) carry the time of the marker, not of
  any record, and are passed over. An ingest always stops at a batch boundary unless it was
  given --ending-offsets inside a batch.

Which group and topics feed a table: the newest ingest commits (their `topiclake` commit info
names the group and the partitions each moved); then every partition of those topics.
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass, field

from topiclake.segments.batch import NO_TIMESTAMP
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.leader_reads import log_batches
from topiclake.segments.errors import UnknownTopicError

from ..log.damage import find_damage
from ..log.roots import BucketLog, FileLog, log_root
from ..log.source import PartitionFiles, list_partition
from ..table import delta
from ..table.location import discover_bucket_tables, discover_tables
from ..table.values import quarantine_uri

log = logging.getLogger(__name__)

INGEST_COMMITS_SEARCHED = 64  # newest commits read back for the ingest group that feeds a table


@dataclass(frozen=True, slots=True)
class PartitionFreshness:
    topic: str
    partition: int
    committed: int | None  # the group's next offset; None: never committed
    log_end: int
    committed_timestamp_ms: int | None  # the newest committed record's; None: none in the log
    log_end_timestamp_ms: int | None  # the last record's in the log; None: the log holds none
    corrupt_offset: int | None = None  # where the log is damaged (no reader gets past it); None: whole

    @property
    def lag_records(self) -> int:
        return max(0, self.log_end - (self.committed or 0))

    @property
    def freshness_s(self) -> float | None:
        """None when either timestamp is unknown (an empty log, nothing committed yet)."""
        if self.committed_timestamp_ms is None or self.log_end_timestamp_ms is None:
            return None
        return max(0, self.log_end_timestamp_ms - self.committed_timestamp_ms) / 1000


@dataclass(slots=True)
class TableState:
    name: str
    uri: str
    version: int = -1
    files: int = 0
    bytes: int = 0
    rows: int = 0
    group: str | None = None
    partitions: list[PartitionFreshness] = field(default_factory=list)
    error: str | None = None  # the table (or its log) could not be read


def table_states(root) -> list[TableState]:
    """Every table's snapshot figures and, where an ingest group feeds it, its partitions'.
    `root`: a directory, or an object-store root (topiclake.store's S3Root): its log is in
    objectlog's layout (bucket_freshness)."""
    source = log_root(root)
    delta.serve_root(root)  # an object-store root's tables are opened with its server and keys
    if isinstance(source, FileLog):
        tables = discover_tables(source.layout)
    else:
        tables = discover_bucket_tables(root)
    quarantines = {quarantine_uri(uri) for uri in tables.values()}
    states = []
    for name, uri in tables.items():
        state = TableState(name, uri)
        try:
            # a quarantine table follows its table's offsets: the table's series say it
            _read_table(source, state, offsets=uri not in quarantines)
        except Exception as exc:  # noqa: BLE001 - one unreadable table must not hide the others
            state.error = f"{type(exc).__name__}: {exc}"
            log.warning("table %s: %s", name, state.error)
        states.append(state)
    return states


def _read_table(source: FileLog | BucketLog, state: TableState, *, offsets: bool) -> None:
    table = delta.load_table(state.uri, source.delta_storage_options)
    if table is None:
        raise FileNotFoundError(f"no Delta table at {state.uri}")
    state.version = table.version()
    actions = delta.active_files(table)
    state.files = actions.num_rows
    state.bytes = sum(actions.column("size_bytes").to_pylist()) if state.files else 0
    state.rows = sum(n or 0 for n in actions.column("num_records").to_pylist()) if state.files else 0
    group, topics = _ingest_feed(table) if offsets else (None, set())
    if group is None:
        return
    state.group = group
    tps = [(t, p) for t in sorted(topics) if _registered(source, t) for p in source.partitions(t)]
    committed = delta.committed_offsets(table, group, tps)
    if isinstance(source, FileLog):
        state.partitions = [_partition_state(list_partition(source.layout, t, p), committed[(t, p)]) for t, p in tps]
    else:
        from ..log.bucket import bucket_freshness

        state.partitions = [PartitionFreshness(t, p, committed[(t, p)],
                                               *bucket_freshness(source.store, t, p, committed[(t, p)]))
                            for t, p in tps]


def _registered(source: FileLog | BucketLog, topic: str) -> bool:
    try:
        source.topic(topic)
        return True
    except UnknownTopicError:
        return False


def _partition_state(files: PartitionFiles, committed: int | None) -> PartitionFreshness:
    """The partition's freshness, or, when its log is damaged past `committed`, the damage: the
    lag then runs to the end the files hold beyond it (the ingest cannot get there)."""
    damage = find_damage(files, committed)
    if damage is None:
        try:
            return partition_freshness(files, committed)
        except CorruptRecordError:
            damage = find_damage(files)  # below committed: bytes already ingested were damaged since
            if damage is None:
                raise
    return PartitionFreshness(files.topic, files.partition, committed, max(damage.log_end, committed or 0), None,
                              None, damage.offset)


def _ingest_feed(table) -> tuple[str | None, set[str]]:
    """The group of the newest ingest commit among the newest commits, and the topics that
    group's commits among them moved (a commit names only the partitions it moved)."""
    group, topics = None, set()
    for commit in table.history(INGEST_COMMITS_SEARCHED):
        info = delta.topiclake_info(commit)
        if info.get("operation") != "ingest" or not info.get("group"):
            continue
        group = group or info["group"]
        if info["group"] == group:
            topics |= {key.rsplit(":", 1)[0] for key in (info.get("offsets") or {})}
    return group, topics


# ------------------------------------------------------------------------------------- the log side

@dataclass(frozen=True, slots=True)
class _Batch:
    base_offset: int
    next_offset: int
    max_timestamp: int
    is_control: bool


def partition_freshness(files: PartitionFiles, committed: int | None) -> PartitionFreshness:
    walked: dict[int, list[_Batch]] = {}

    def batches(index: int) -> list[_Batch]:
        if index not in walked:
            walked[index] = _segment_batches(files, index)
        return walked[index]

    if not files.segments:
        log_end = files.log_start_offset
    else:
        last = len(files.segments) - 1
        active = batches(last)
        log_end = active[-1].next_offset if active else files.segments[last].base_offset
    return PartitionFreshness(
        files.topic, files.partition, committed, log_end,
        committed_timestamp_ms=_timestamp_below(files, committed, batches) if committed else None,
        log_end_timestamp_ms=_timestamp_below(files, log_end, batches))


def _timestamp_below(files: PartitionFiles, offset: int, batches) -> int | None:
    """The max timestamp of the last data batch that starts below `offset`."""
    below = [i for i, s in enumerate(files.segments) if s.base_offset < offset]
    for index in reversed(below):
        for batch in reversed(batches(index)):
            if batch.base_offset < offset and not batch.is_control and batch.max_timestamp != NO_TIMESTAMP:
                return batch.max_timestamp
    return None


def _segment_batches(files: PartitionFiles, index: int) -> list[_Batch]:
    """The headers of segment `index` as the jobs read it (a fenced leader's batches skipped)."""
    segment = files.segments[index]
    last = index == len(files.segments) - 1
    try:
        size = os.stat(segment.path).st_size
    except FileNotFoundError:  # retired by retention since the listing
        return []
    if not last:
        size = min(size, segment.size)
    if size == 0:
        return []
    with open(segment.path, "rb") as f:
        buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    try:
        out = []
        for batch in log_batches(buf, files.epochs, source=segment.path, last=last, limit=files.limit(index)):
            h = batch.header
            out.append(_Batch(h.base_offset, h.next_offset, h.max_timestamp, h.is_control))
            del batch, h
        return out
    finally:
        try:
            buf.close()
        except BufferError:  # a view is still alive somewhere; it is unmapped when dropped
            pass
