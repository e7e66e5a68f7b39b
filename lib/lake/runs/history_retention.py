"""retention.ms and retention.bytes over a tiered topic's table: the history the table keeps for
the log (docs/ARCHIVE.md) lives as long and grows as large as the topic's retention.* says, as a
remote tier's segments do in Kafka (KIP-405: local.retention.* bounds the log, retention.* the
whole history).

Kafka deletes whole segments from the oldest while a segment's largest timestamp is past
retention.ms, or while the partition without it is still at least retention.bytes, so what goes
is always a prefix of the log. Here the same rules row by row, per partition: the rows below the
first offset whose timestamp is within retention.ms go (a later record with an older timestamp
stays, as it would in its segment), and the rows below the newest suffix whose records' bytes
(key and value; the table's files are Parquet's size, not the log's) fit in retention.bytes. One
delta-rs DELETE for the topic. The ingest's offsets (the Delta txn versions) are untouched: what
was ingested stays ingested. ListOffsets EARLIEST and a fetch below the log's start follow the
table's new first offset.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc

from topiclake.archive.table import holds_every_record, load
from topiclake.segments.storage import TopicMeta


@dataclass(slots=True)
class HistoryCut:
    """What retention.ms removed (or, in a dry run, would remove) from a tiered topic's table."""

    topic: str
    uri: str
    keep_from: dict[int, int] = field(default_factory=dict)  # partition -> its first offset kept
    rows: int = 0
    error: str | None = None

    def describe(self, *, dry_run: bool) -> str:
        if self.error:
            return f"ERROR {self.error}"
        if not self.keep_from:
            return "history within retention.ms and retention.bytes: nothing to delete"
        verb = "would delete" if dry_run else "deleted"
        starts = ", ".join(f"{self.topic}-{p} from {o}" for p, o in sorted(self.keep_from.items()))
        return f"{verb} {self.rows} rows past retention.ms or retention.bytes; the history now starts at {starts}"


def cut_history(meta: TopicMeta, uri: str, storage_options: dict[str, str] | None, *, now_ms: int,
                dry_run: bool) -> HistoryCut | None:
    """The cut of `meta`'s table by retention.ms and retention.bytes, or None when none applies (not
    tiered, kept forever, no table or an upsert table)."""
    config = meta.log_config
    if not config.remote_storage_enable or (config.retention_ms < 0 and config.retention_bytes < 0):
        return None
    table = load(uri, storage_options)
    if table is None or not holds_every_record(table):
        return None
    out = HistoryCut(meta.name, uri)
    columns = ["partition", "offset", "timestamp"] + (["key", "value"] if config.retention_bytes >= 0 else [])
    rows = table.to_pyarrow_dataset().to_table(columns=columns, filter=pc.field("topic") == meta.name)
    for partition in range(meta.partitions):
        mine = rows.filter(pc.equal(rows["partition"], partition)).sort_by("offset")
        if not mine.num_rows:
            continue
        keep_from = pc.min(mine["offset"]).as_py()
        if config.retention_ms >= 0:
            cutoff = datetime.datetime.fromtimestamp((now_ms - config.retention_ms) / 1000, tz=datetime.timezone.utc)
            recent = mine.filter(pc.fill_null(pc.greater_equal(mine["timestamp"], cutoff), True))
            keep_from = pc.min(recent["offset"]).as_py() if recent.num_rows else pc.max(mine["offset"]).as_py() + 1
        if config.retention_bytes >= 0:
            keep_from = max(keep_from, _first_within_bytes(mine, config.retention_bytes))
        gone = pc.sum(pc.less(mine["offset"], keep_from)).as_py() or 0
        if gone:
            out.keep_from[partition] = keep_from
            out.rows += gone
    if out.keep_from and not dry_run:
        predicate = " OR ".join(f"(\"topic\" = '{meta.name}' AND \"partition\" = {p} AND \"offset\" < {o})"
                                for p, o in sorted(out.keep_from.items()))
        table.delete(predicate)
    return out


def _first_within_bytes(rows, limit: int) -> int:
    """The first offset of the newest rows (in offset order) whose key and value bytes sum to at
    most `limit`; past the last row when even the newest alone is larger."""
    sizes = (pc.fill_null(pc.binary_length(rows["key"]), 0).to_numpy(zero_copy_only=False)
             + pc.fill_null(pc.binary_length(rows["value"]), 0).to_numpy(zero_copy_only=False))
    from_the_end = np.cumsum(sizes[::-1])[::-1]  # bytes of each row and every newer one
    within = np.nonzero(from_the_end <= limit)[0]
    offsets = rows["offset"].to_numpy(zero_copy_only=False)
    return int(offsets[within[0]]) if len(within) else int(offsets[-1]) + 1
