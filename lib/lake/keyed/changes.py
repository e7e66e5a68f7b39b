"""Records as changes of a keyed table: the seam between decoding and upsert tables.

An upsert table keeps one row per key. Each record of its topic is a change of that key: an
upsert of the row it carries, or a delete (a tombstone: a null value; a Debezium `d` event).
extract.py turns a task's decoded records into `Changes`, by the table's value format (its
ChangeSpec); this module holds what every format shares. A record without a key (a null record
key, or every key column null) is no change of any row: it goes to the quarantine table (else all
keyless records would collapse into one row).

Executors extract; the driver builds the picklable `ChangeSpec` once per table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..table.schema import DATA_SCHEMA
from ..table.values import ERROR_COLUMN, QUARANTINE_SCHEMA

if TYPE_CHECKING:
    from .cdc import CdcSpec

RAW, DEBEZIUM = "raw", "debezium"
FORMATS = (RAW, DEBEZIUM)
NO_KEY = "record has no key; an upsert table keys its rows by the record key"


@dataclass(frozen=True, slots=True)
class ChangeSpec:
    """What an executor needs to read a table's records as changes (picklable)."""

    format: str = RAW
    key_columns: tuple[str, ...] = ("key",)  # the merge key: the record key, or its typed columns
    cdc: "CdcSpec | None" = None  # DEBEZIUM: the table's columns and how events become them (cdc_plan.plan_cdc)


@dataclass(frozen=True, slots=True)
class Changes:
    rows: pa.Table  # one row per change, in the table's columns (topic, partition, offset, timestamp, ...)
    deleted: pa.Array  # bool per row: True deletes the key's row
    key_columns: tuple[str, ...]  # the columns of `rows` that identify a row
    quarantine: pa.Table  # records that are not a change of this format: QUARANTINE_SCHEMA (+ error)


def keyless(rows: pa.Table, key_columns: tuple[str, ...]) -> np.ndarray:
    """Per row: whether it has no key, i.e. a null record key or every key column null. (One null
    field of a key record is a value of the key, as an optional field of it is.)"""
    missing = np.ones(rows.num_rows, dtype=bool)
    for name in key_columns:
        missing &= pc.is_null(rows.column(name)).to_numpy(zero_copy_only=False)
    if "key" in rows.column_names:
        missing |= pc.is_null(rows.column("key")).to_numpy(zero_copy_only=False)
    return missing


def quarantined(rows: pa.Table, errors: dict[int, str]) -> pa.Table:
    """The records at the rows `errors` names, as quarantine rows (QUARANTINE_SCHEMA: why in `error`)."""
    if not errors:
        return QUARANTINE_SCHEMA.empty_table()
    bad = sorted(errors)
    return rows.select(DATA_SCHEMA.names).take(pa.array(bad, pa.int64())).append_column(
        pa.field(ERROR_COLUMN, pa.string()), pa.array([errors[i] for i in bad], pa.string()))
