"""Typed columns from JSON values; undecodable records go to the quarantine table, exactly once."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table import delta
from topiclake.lake.table.values import ValueSchema, decode_values

from tests.support.lake import read_table

SCHEMA = {"fields": {"id": "long", "amount": "double", "note": "string", "at": "timestamp"}}


def test_decode_values_is_row_aligned():
    schema = ValueSchema.from_json(json.dumps(SCHEMA)).arrow
    values = pa.array([b'{"id": 1, "amount": 2.5}', b'{"id":\n2, "extra": [1]}', None, b"nope", b"",
                       b'{"id": "x"}', b'{"id": 3, "at": "2024-05-01T00:00:00Z"}'], pa.binary())
    typed, errors = decode_values(values, schema)
    assert typed["id"].to_pylist() == [1, 2, None, None, None, None, 3]
    assert [e is None for e in errors.to_pylist()] == [True, True, True, False, False, False, True]
    good, _ = decode_values(values.filter(pa.array([True, True, True, False, False, False, True])), schema)
    assert good["amount"].to_pylist() == [2.5, None, None, None]


def test_bad_schema_files_are_rejected():
    with pytest.raises(Exception, match="collides"):
        ValueSchema.from_json('{"fields": {"offset": "long"}}')
    with pytest.raises(Exception, match="unknown type"):
        ValueSchema.from_json('{"fields": {"x": "decimal"}}')


def test_typed_columns_and_quarantine_exactly_once(spark, root, topic_writer, tmp_path, monkeypatch):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "orders.json").write_text(json.dumps(SCHEMA))
    w = topic_writer("orders")
    w.produce(0, [b'{"id": 1, "amount": 9.5, "note": "ok"}', b"not json", None, b'{"id": "seven"}'])  # 0-3
    options = IngestOptions(topics=("orders",), root=root, schemas_dir=schemas)

    # the main commit fails after the quarantine commit: the rerun must not quarantine twice
    real_commit = delta.commit

    def flaky(uri, **kwargs):
        if not uri.endswith("_quarantine"):
            raise RuntimeError("driver died before the main commit")
        return real_commit(uri, **kwargs)

    monkeypatch.setattr(delta, "commit", flaky)
    with pytest.raises(RuntimeError):
        ingest(spark, options)
    monkeypatch.setattr(delta, "commit", real_commit)
    w.produce(0, [b'{"id": 2, "at": "2024-05-01T10:00:00Z"}', b"{broken"])  # 4-5

    result = ingest(spark, options)
    assert result.tables[0].partitions[0].quarantined == 1  # offset 5; 1 and 3 were already there
    table, data = read_table(root / "tables" / "orders")
    assert sorted(data["offset"].to_pylist()) == [0, 2, 4]
    rows = {r["offset"]: r for r in data.to_pylist()}
    assert (rows[0]["id"], rows[0]["amount"], rows[0]["note"]) == (1, 9.5, "ok")
    assert rows[2]["id"] is None and rows[2]["value"] is None  # a tombstone is not an error
    assert rows[4]["at"].isoformat() == "2024-05-01T10:00:00+00:00"
    qtable, quarantine = read_table(root / "tables" / "orders_quarantine")
    assert sorted(quarantine["offset"].to_pylist()) == [1, 3, 5]
    assert all("JSON" in e for e in quarantine["error"].to_pylist())
    app = delta.app_id("topiclake-ingest-orders", "orders", 0)
    assert table.transaction_version(app) == 6 and qtable.transaction_version(app) == 6

    # a backfill keeps the typed columns and quarantines nothing again
    backfill(spark, BackfillOptions(root=root, table="orders", topic="orders", partition=0,
                                    from_offset=0, to_offset=6))
    _, data = read_table(root / "tables" / "orders")
    assert sorted(data["offset"].to_pylist()) == [0, 2, 4] and sorted(data["id"].to_pylist(), key=str) == [1, 2, None]
    assert sorted(read_table(root / "tables" / "orders_quarantine")[1]["offset"].to_pylist()) == [1, 3, 5]
