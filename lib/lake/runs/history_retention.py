"""retention.ms over a tiered topic's table: the history the table keeps for the log
(docs/ARCHIVE.md) lives as long as the topic's retention.ms says, as a remote tier's segments do
in Kafka (KIP-405: local.retention.* bounds the log, retention.* the whole history).

Kafka deletes whole segments from the oldest while a segment's largest timestamp is past the
retention, so what goes is always a prefix of the log. Here the same rule row by row: per
partition, the rows below the first offset whose timestamp is within retention.ms go (a later
record with an older timestamp stays, as it would in its segment), in one delta-rs DELETE for the
topic. The ingest's offsets (the Delta txn versions) are untouched: what was ingested stays
ingested. ListOffsets EARLIEST and a fetch below the log's start follow the table's new first
offset. retention.bytes over the table is not applied (the table's size is Parquet's, not the
log's).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

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
            return "history within retention.ms: nothing to delete"
        verb = "would delete" if dry_run else "deleted"
        starts = ", ".join(f"{self.topic}-{p} from {o}" for p, o in sorted(self.keep_from.items()))
        return f"{verb} {self.rows} rows past retention.ms; the history now starts at {starts}"


def cut_history(meta: TopicMeta, uri: str, storage_options: dict[str, str] | None, *, now_ms: int,
                dry_run: bool) -> HistoryCut | None:
    """The cut of `meta`'s table by retention.ms, or None when none applies (not tiered, kept
    forever, no table or an upsert table)."""
    config = meta.log_config
    if not config.remote_storage_enable or config.retention_ms < 0:
        return None
    table = load(uri, storage_options)
    if table is None or not holds_every_record(table):
        return None
    out = HistoryCut(meta.name, uri)
    cutoff = datetime.datetime.fromtimestamp((now_ms - config.retention_ms) / 1000, tz=datetime.timezone.utc)
    rows = table.to_pyarrow_dataset().to_table(columns=["partition", "offset", "timestamp"],
                                                filter=pc.field("topic") == meta.name)
    for partition in range(meta.partitions):
        mine = rows.filter(pc.equal(rows["partition"], partition))
        if not mine.num_rows:
            continue
        recent = mine.filter(pc.fill_null(pc.greater_equal(mine["timestamp"], cutoff), True))
        keep_from = pc.min(recent["offset"]).as_py() if recent.num_rows else pc.max(mine["offset"]).as_py() + 1
        gone = pc.sum(pc.less(mine["offset"], keep_from)).as_py() or 0
        if gone:
            out.keep_from[partition] = keep_from
            out.rows += gone
    if out.keep_from and not dry_run:
        predicate = " OR ".join(f"(\"topic\" = '{meta.name}' AND \"partition\" = {p} AND \"offset\" < {o})"
                                for p, o in sorted(out.keep_from.items()))
        table.delete(predicate)
    return out
