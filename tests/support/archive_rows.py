"""Rows of a topic's table as the ingest writes them (the lake's DATA_SCHEMA) and their commit
with the ingest's offsets, for the archive's tests: deltalake writes them, no Spark."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from deltalake import write_deltalake
from deltalake.transaction import CommitProperties, Transaction

from topiclake.archive.table import app_id, ingest_group
from topiclake.lake.table.schema import DATA_SCHEMA

TOPIC = "t"
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def rows(partition: int, offsets: list[int], *, log_append: bool = False) -> pa.Table:
    n = len(offsets)
    return pa.table({
        "topic": [TOPIC] * n, "partition": [partition] * n, "offset": offsets,
        "timestamp": [EPOCH + dt.timedelta(milliseconds=o // 4 if log_append else 7 * o) for o in offsets],
        "timestamp_type": [1 if log_append else 0] * n,
        "key": [None if o % 5 == 0 else b"k%d" % o for o in offsets],
        "value": [None if o % 7 == 3 else b"v" * (o % 50) for o in offsets],
        "headers": [[{"key": "h", "value": b"%d" % o}, {"key": "none", "value": None}] if o % 2 else []
                    for o in offsets],
        "ingested_at": [None] * n}, schema=DATA_SCHEMA)


def commit(uri: str, table: pa.Table, ends: dict[int, int], **kwargs) -> None:
    write_deltalake(uri, table, mode="append", commit_properties=CommitProperties(app_transactions=[
        Transaction(app_id(ingest_group(TOPIC), TOPIC, p), end) for p, end in ends.items()]), **kwargs)
