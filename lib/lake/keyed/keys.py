"""The keys of an upsert table's rows (upsert.py): the stable hash that puts a key in its bucket
(`bucket_of`), and the newest change per key (`newest_per_key`).

Which change is newest: within one topic partition, the higher offset, always (an older offset
never overwrites a newer one, so replaying an old range can never move a key back). Across
partitions (a key that moved partition, or a multi-topic table): the newer timestamp, then the
higher (topic, partition, offset) as a deterministic tie break.

All of it is pyarrow compute over columns: sort_indices, group_by, take; no per-record objects.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_POSITION = "_topiclake_position"

# ------------------------------------------------------------------------------------------ hashing

_MULTIPLIER = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime, as a polynomial base


def key_hash(rows: pa.Table, key_columns: tuple[str, ...]) -> np.ndarray:
    """A stable 64-bit hash per row of its key columns (the same bytes give the same hash in every
    process and version: no per-process seed). Non-binary columns hash their text form, decimals
    without trailing zeros. Null leaves are skipped, so a record key that gains an optional field
    (a new key schema version) stays in its bucket: equal keys must hash equal, whatever schema
    version wrote them; unequal ones may share a bucket."""
    out = np.zeros(rows.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in key_columns:
            for leaf in _leaves(rows.column(name)):
                hashes, valid = _binary_hash(leaf)
                out = np.where(valid, out * np.uint64(31) + hashes, out)
        return _mix(out)


def _leaves(column) -> list:
    """A key column's comparable parts: itself, or a struct's fields, depth first (a registry-typed
    key is a record)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_struct(array.type):
        return [array]
    return [leaf for child in array.flatten() for leaf in _leaves(child)]


def bucket_of(rows: pa.Table, key_columns: tuple[str, ...], buckets: int) -> np.ndarray:
    return (key_hash(rows, key_columns) % np.uint64(buckets)).astype(np.int32)


def _binary_hash(column) -> tuple[np.ndarray, np.ndarray]:
    """(hash of each value's bytes, whether the value is not null)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_decimal(array.type):  # 1.50 and 1.500 are one key: a widened scale must not move it
        array = pc.replace_substring_regex(pc.replace_substring_regex(
            pc.cast(array, pa.string()), r"(\.[0-9]*?)0+$", r"\1"), r"\.$", "")
    elif not (pa.types.is_binary(array.type) or pa.types.is_string(array.type)):
        array = pc.cast(array, pa.string())
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary())
    n = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1, offset=array.offset * 4).astype(np.int64)
    data_buffer = array.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    first, last = offsets[0], offsets[-1]
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        if last > first:
            starts = offsets[:-1] - first
            within = np.arange(last - first, dtype=np.int64) - np.repeat(starts, lengths)
            powers = np.cumprod(np.full(int(lengths.max()), _MULTIPLIER, dtype=np.uint64)) // _MULTIPLIER
            powers[0] = 1  # [1, p, p^2, ...] modulo 2^64
            terms = data[first:last].astype(np.uint64) * powers[within]
            sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
            hashes = sums[offsets[1:] - first] - sums[offsets[:-1] - first]
        else:
            hashes = np.zeros(n, np.uint64)
        hashes = hashes + lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    valid = np.asarray(array.is_valid()) if array.null_count else np.ones(n, dtype=bool)
    return hashes, valid


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches the low bits the bucket is taken from."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


# ------------------------------------------------------------------------------------ newest change

def newest_per_key(rows: pa.Table, key_columns: tuple[str, ...]) -> pa.Table:
    """The newest row per key (see the module docstring for the order)."""
    if rows.num_rows <= 1:
        return rows
    rows, keys, added = _groupable_keys(rows, key_columns)
    newest = _newest(rows, keys)
    return newest.drop_columns(added) if added else newest


def _newest(rows: pa.Table, keys: list[str]) -> pa.Table:
    if _one_partition(rows):  # a task's records, or a single-partition topic: offsets decide
        return _last_of_groups(rows, keys, ["offset"])
    rows = _last_of_groups(rows, keys + ["topic", "partition"], ["offset"])
    if _unique(rows, keys):  # every key in one partition only, as Kafka's partitioner puts them
        return rows
    return _last_of_groups(rows, keys, ["timestamp", "topic", "partition", "offset"])


def _groupable_keys(rows: pa.Table, key_columns: tuple[str, ...]) -> tuple[pa.Table, list[str], list[str]]:
    """Arrow groups by no struct: a struct key column is grouped by its fields, added as temporary
    columns; (rows, the key column names to group by, the temporary ones)."""
    keys, added = [], []
    for name in key_columns:
        column = rows.column(name)
        if not pa.types.is_struct(column.type):
            keys.append(name)
            continue
        for leaf in _leaves(column):
            temporary = f"_topiclake_key_{len(added)}"
            rows = rows.append_column(temporary, leaf)
            keys.append(temporary)
            added.append(temporary)
    return rows, keys, added


def _unique(rows: pa.Table, keys: list[str]) -> bool:
    if len(keys) == 1:
        return pc.count_distinct(rows.column(keys[0]), mode="all").as_py() == rows.num_rows
    return rows.select(keys).group_by(keys).aggregate([]).num_rows == rows.num_rows


def _one_partition(rows: pa.Table) -> bool:
    return all(pc.count_distinct(rows.column(c)).as_py() == 1 and rows.column(c).null_count == 0
               for c in ("topic", "partition"))


def _last_of_groups(rows: pa.Table, keys: list[str], order: list[str]) -> pa.Table:
    """Per group of `keys`, the row that sorts last by `order`."""
    ordered = rows if _ascending(rows, order) else rows.take(
        pc.sort_indices(rows, [(c, "ascending", "at_start") for c in order]))
    positions = pa.table({**{k: ordered.column(k) for k in keys},
                          _POSITION: pa.array(np.arange(ordered.num_rows, dtype=np.int64))})
    last = positions.group_by(keys, use_threads=False).aggregate([(_POSITION, "max")])
    return ordered.take(last.column(f"{_POSITION}_max"))


def _ascending(rows: pa.Table, order: list[str]) -> bool:
    """A task's records are in offset order already: no sort needed."""
    if len(order) != 1 or rows.column(order[0]).null_count:
        return False
    values = rows.column(order[0]).to_numpy()
    return bool(np.all(values[1:] >= values[:-1]))
