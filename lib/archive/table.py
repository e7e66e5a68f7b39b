"""What a topic's table holds of a partition, read with deltalake and pyarrow (columnar).

The ingest job keeps, in each Delta commit, the next offset its group has to read per partition
(a `txn` action, app id `<group>:<topic>:<partition>`): every offset below it is in the table (or
was never a record the table keeps: a control batch, an aborted transaction's record). That is
what segment retention may delete. The rows themselves are found through the files' min/max
statistics (`partition`, `offset`), so a read opens only the files that can hold the range.

Only an append table holds every record; an upsert table keeps one row per key, so it archives
nothing (`holds_every_record`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from topiclake.segments.arrow import HEADER_TYPE

INGEST_GROUP_PREFIX = "topiclake-ingest-"  # a table's default group: the prefix + its name
KIND_PROPERTY = "topiclake.kind"
APPEND_KIND = "append"

#: The columns a record batch is made of, with the types the encoder reads.
RECORD_COLUMNS = {"offset": pa.int64(), "timestamp": pa.timestamp("ms", tz="UTC"), "timestamp_type": pa.int8(),
                  "key": pa.binary(), "value": pa.binary(), "headers": pa.list_(HEADER_TYPE)}


def ingest_group(table_name: str) -> str:
    return INGEST_GROUP_PREFIX + table_name


def app_id(group: str, topic: str, partition: int) -> str:
    """The Delta txn app id under which `group` keeps its next offset of the partition."""
    return f"{group}:{topic}:{partition}"


def load(uri: str, storage_options: dict[str, str] | None = None) -> DeltaTable | None:
    """The table at `uri`, or None when there is none (yet)."""
    try:
        return DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError:
        return None


def holds_every_record(table: DeltaTable) -> bool:
    """An append table (a row per record); an upsert table keeps only each key's newest."""
    return table.metadata().configuration.get(KIND_PROPERTY, APPEND_KIND) == APPEND_KIND


def archived_end(table: DeltaTable | None, group: str, topic: str, partition: int) -> int | None:
    """The first offset of the partition the table does not hold (None: it holds none of it)."""
    if table is None or not holds_every_record(table):
        return None
    return table.transaction_version(app_id(group, topic, partition))


def _files(table: DeltaTable) -> pa.Table:
    """path, size and the partition/offset statistics of every file of the snapshot."""
    actions = pa.table(table.get_add_actions(flatten=True))
    wanted = ["path", "size_bytes", "min.partition", "max.partition", "min.offset", "max.offset"]
    return actions.select([c for c in wanted if c in actions.column_names])


class Snapshot:
    """One version of a topic's table, with what reads of it share (the file statistics)."""

    def __init__(self, table: DeltaTable, topic: str):
        self.table = table
        self.topic = topic
        self.version = table.version()
        self.files = _files(table)
        self._first: dict[int, int | None] = {}

    def _candidates(self, partition: int, start: int) -> pa.Table:
        """Files that may hold rows of the partition at or above `start` (no statistics: may)."""
        files = self.files
        if files.num_rows == 0 or "min.partition" not in files.column_names:
            return files
        may = pc.and_kleene(pc.and_kleene(pc.less_equal(files["min.partition"], partition),
                                          pc.greater_equal(files["max.partition"], partition)),
                            pc.greater_equal(files["max.offset"], start))
        return files.filter(pc.fill_null(may, True))

    def first_offset(self, partition: int) -> int | None:
        """The first offset of the partition the table holds (None: no row), kept per version.
        Files in the order of their first offset: the rows at or below the end of the first k of
        them (every file that may hold one is read, by the statistics) hold the first offset as
        soon as they hold any row of the partition; k doubles until they do."""
        if partition not in self._first:
            self._first[partition] = self._find_first(partition)
        return self._first[partition]

    def _find_first(self, partition: int) -> int | None:
        flt = (pc.field("topic") == self.topic) & (pc.field("partition") == partition)
        files = self._candidates(partition, 0)
        if not files.num_rows or "max.offset" not in files.column_names or files["min.offset"].null_count:
            uppers: list[int | None] = [None]  # no statistics to go by: one read of the column
        else:
            ends = files.sort_by([("min.offset", "ascending")])["max.offset"].to_numpy(zero_copy_only=False)
            steps = sorted({min(2 ** i, len(ends)) - 1 for i in range(len(ends).bit_length() + 1)})
            uppers = [int(np.max(ends[:k + 1])) for k in steps]
        for upper in uppers:
            prune = [("topic", "=", self.topic), ("partition", "=", partition)]
            within = flt
            if upper is not None:
                prune.append(("offset", "<=", upper))
                within = flt & (pc.field("offset") <= upper)
            offsets = self.table.to_pyarrow_dataset(file_pruning_predicate=prune).to_table(
                columns=["offset"], filter=within)["offset"]
            if len(offsets):
                return int(pc.min(offsets).as_py())
        return None

    def read(self, partition: int, start: int, end: int, budget: int) -> pa.RecordBatch:
        """Rows of the partition from `start` (below `end`) in offset order, about `budget` bytes
        of files' worth (the caller cuts them to its limit): the files are taken in offset order
        until their size passes the budget, and every row up to the last taken file's end is read
        (none there, as in a file of other partitions: the next files)."""
        while True:
            upper = self._window(partition, start, end, budget)
            prune = [("topic", "=", self.topic), ("partition", "=", partition), ("offset", ">=", start),
                     ("offset", "<=", upper)]
            flt = ((pc.field("topic") == self.topic) & (pc.field("partition") == partition)
                   & (pc.field("offset") >= start) & (pc.field("offset") <= upper))
            rows = self.table.to_pyarrow_dataset(file_pruning_predicate=prune).to_table(
                columns=list(RECORD_COLUMNS), filter=flt)
            if rows.num_rows or upper >= end - 1:
                return as_records(rows.sort_by("offset"))
            start = upper + 1

    def _window(self, partition: int, start: int, end: int, budget: int) -> int:
        """The last offset to read: the end of the files (offset order) whose sizes pass `budget`."""
        files = self._candidates(partition, start)
        if not files.num_rows or "min.offset" not in files.column_names or files["min.offset"].null_count:
            return end - 1
        order = files.sort_by([("min.offset", "ascending")])
        sizes = np.cumsum(order["size_bytes"].to_numpy(zero_copy_only=False))
        taken = int(np.searchsorted(sizes, budget)) + 1
        return min(end - 1, int(pc.max(order["max.offset"].slice(0, taken)).as_py()))


def as_records(rows: pa.Table) -> pa.RecordBatch:
    """The rows in the encoder's types: nulls where a record has none become Kafka's (-1 timestamp,
    CreateTime, no headers)."""
    columns = {}
    for name, kind in RECORD_COLUMNS.items():
        column = rows[name].combine_chunks() if rows.num_rows else pa.array([], kind)
        if name == "timestamp":
            kind = pa.int64()  # Kafka's milliseconds (the table keeps microseconds)
            column = pc.fill_null(column.cast(RECORD_COLUMNS["timestamp"], safe=False).cast(kind), -1)
        elif name == "timestamp_type":
            column = pc.fill_null(column, 0)
        elif name == "headers" and column.null_count:
            column = pc.if_else(column.is_null(), pa.scalar([], column.type), column)
        columns[name] = column.cast(kind) if column.type != kind else column
    return pa.RecordBatch.from_pydict(columns)
