"""A task's decoded records as changes of its upsert table (`extract`), by the table's value format:

- `raw`: the key is the record key (bytes), or the key columns the schema registry types; the
  row is the record as an append table stores it; a null value deletes. A record without a key
  goes to the quarantine table (changes.keyless).
- `debezium`: a Debezium change event (cdc.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .changes import DEBEZIUM, FORMATS, NO_KEY, RAW, ChangeSpec, Changes, keyless, quarantined


def extract(spec: ChangeSpec, rows: pa.Table) -> Changes:
    """The changes in `rows` (a task's records with the table's columns, typed ones included)."""
    if spec.format == DEBEZIUM:
        from .cdc import debezium_changes

        return debezium_changes(spec, rows)
    if spec.format != RAW:
        raise ValueError(f"unknown value format {spec.format!r}; choose from {FORMATS}")
    missing = keyless(rows, spec.key_columns)
    quarantine = quarantined(rows, {int(i): NO_KEY for i in np.flatnonzero(missing)})
    if missing.any():
        rows = rows.filter(pa.array(~missing))
    deleted = pc.is_null(rows.column("value")).combine_chunks()
    return Changes(rows, deleted, spec.key_columns, quarantine)
